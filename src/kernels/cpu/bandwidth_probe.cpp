#include "kernels/cpu/bandwidth_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/huge_page_arena.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {
namespace {

// Sum of the floats in [begin, end), 64 bytes per iteration in independent accumulators:
// compiled with the widest vector unit for each level (TACHYON_DISPATCH_BY_LEVEL) so that one
// core can issue loads as fast as its share of the memory system delivers them.
__attribute__((always_inline)) inline float sum_floats_body(const float* begin, const float* end) {
  float lanes[16] = {};
  for (const float* p = begin; p + 16 <= end; p += 16) {
    for (int i = 0; i < 16; ++i) lanes[i] += p[i];
  }
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kProbe, float, sum_floats,
                          (const float* begin, const float* end), (begin, end))

BandwidthProbe::BandwidthProbe(ThreadPool& pool, size_t buffer_bytes)
    : pool_(pool), count_(std::max<size_t>(buffer_bytes / sizeof(float), 1024)) {
  buffer_ = reinterpret_cast<float*>(arena_.allocate(count_ * sizeof(float)));
  // Written by the threads that will read it (first touch places the pages near them).
  pool_.run([this](int thread_index, int num_threads) {
    const size_t begin = count_ * thread_index / num_threads;
    const size_t end = count_ * (thread_index + 1) / num_threads;
    for (size_t i = begin; i < end; ++i) buffer_[i] = static_cast<float>(i & 7);
  });
}

void BandwidthProbe::read_once() {
  std::atomic<uint32_t> sink{0};  // keeps the sums alive
  pool_.run([&](int thread_index, int num_threads) {
    const size_t begin = count_ * thread_index / num_threads;
    const size_t end = count_ * (thread_index + 1) / num_threads;
    const float sum = sum_floats(buffer_ + begin, buffer_ + end);
    uint32_t bits;
    std::memcpy(&bits, &sum, sizeof(bits));
    sink.fetch_xor(bits, std::memory_order_relaxed);
  });
}

BandwidthMeasurement BandwidthProbe::measure(int repetitions) {
  read_once();
  BandwidthMeasurement result;
  result.buffer_bytes = count_ * sizeof(float);
  for (int r = 0; r < std::max(1, repetitions); ++r) {
    const auto start = std::chrono::steady_clock::now();
    read_once();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.bytes_per_second =
        std::max(result.bytes_per_second, static_cast<double>(result.buffer_bytes) / seconds);
  }
  return result;
}

BandwidthMeasurement measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes,
                                            int repetitions) {
  return BandwidthProbe(pool, buffer_bytes).measure(repetitions);
}

}  // namespace tachyon::kernels
