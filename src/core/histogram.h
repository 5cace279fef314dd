// A Prometheus-style histogram: fixed upper bounds, counts per bucket, sum. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tachyon {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // [i] = observations <= upper_bounds[i]
    uint64_t count = 0;                       // all observations (the +Inf bucket)
    double sum = 0;
  };
  Snapshot snapshot() const;

  // Bounds start, start·factor, … (count of them).
  static std::vector<double> exponential_bounds(double start, double factor, int count);

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
};

}  // namespace tachyon
