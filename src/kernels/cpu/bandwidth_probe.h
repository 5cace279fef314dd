// Memory read bandwidth as the decode kernels see it: every thread of the pool streams its share
// of a buffer far larger than the caches, summing it with the widest vectors this CPU has (so
// the loop is bound by memory, not arithmetic). `tachyon bench` divides it into the bytes a
// decoded token reads to print the decode roofline.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace tachyon::kernels {

struct BandwidthMeasurement {
  double bytes_per_second = 0;  // best of the repetitions
  size_t buffer_bytes = 0;
};

// Reads a `buffer_bytes` buffer `repetitions` times (after one untimed pass that faults its
// pages in) with all of `pool`'s threads.
BandwidthMeasurement measure_read_bandwidth(ThreadPool& pool,
                                            size_t buffer_bytes = size_t{512} << 20,
                                            int repetitions = 5);

}  // namespace tachyon::kernels
