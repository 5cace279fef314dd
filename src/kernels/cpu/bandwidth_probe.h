// Memory read bandwidth as the decode kernels see it: every thread of the pool streams its share
// of a buffer far larger than the caches, summing it with the widest vectors this CPU has (so
// the loop is bound by memory, not arithmetic). `tachyon bench` divides it into the bytes a
// decoded token reads to print the decode roofline, probing right before and after each decode
// repetition: on a shared machine the bandwidth on offer changes from minute to minute.
#pragma once

#include <cstddef>

#include "core/huge_page_arena.h"
#include "core/thread_pool.h"

namespace tachyon::kernels {

struct BandwidthMeasurement {
  double bytes_per_second = 0;  // best of the repetitions
  size_t buffer_bytes = 0;
};

class BandwidthProbe {
 public:
  // Allocates the buffer (huge pages, like the weights) and has each thread of `pool` write
  // its share, so its pages are faulted in before anything is timed.
  explicit BandwidthProbe(ThreadPool& pool, size_t buffer_bytes = size_t{512} << 20);

  // Reads the whole buffer `repetitions` times (after one untimed pass) with all threads.
  BandwidthMeasurement measure(int repetitions = 5);

 private:
  void read_once();

  ThreadPool& pool_;
  HugePageArena arena_;
  float* buffer_ = nullptr;
  size_t count_ = 0;  // floats in buffer_
};

// The probe's read loop: the sum of the floats in [begin, end), at the active kernel level.
float sum_floats(const float* begin, const float* end);

// A probe used once.
BandwidthMeasurement measure_read_bandwidth(ThreadPool& pool,
                                            size_t buffer_bytes = size_t{512} << 20,
                                            int repetitions = 5);

}  // namespace tachyon::kernels
