#include "core/histogram.h"

#include <algorithm>

namespace tachyon {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::observe(double value) {
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.upper_bounds = upper_bounds_;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += counts_[i];
    snapshot.cumulative_counts.push_back(running);
  }
  snapshot.count = running + counts_.back();
  snapshot.sum = sum_;
  return snapshot;
}

std::vector<double> Histogram::exponential_bounds(double start, double factor, int count) {
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

}  // namespace tachyon
