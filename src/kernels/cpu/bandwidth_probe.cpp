#include "kernels/cpu/bandwidth_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/huge_page_arena.h"

namespace tachyon::kernels {
namespace {

// Sum of the floats in [begin, end), 64 bytes per iteration in independent accumulators:
// compiled with the widest vector unit for each level (target_clones) so that one core can
// issue loads as fast as its share of the memory system delivers them.
__attribute__((target_clones("avx512f", "avx2", "default"))) float sum_floats(const float* begin,
                                                                             const float* end) {
  float lanes[16] = {};
  for (const float* p = begin; p + 16 <= end; p += 16) {
    for (int i = 0; i < 16; ++i) lanes[i] += p[i];
  }
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace

BandwidthMeasurement measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes,
                                            int repetitions) {
  const size_t count = std::max<size_t>(buffer_bytes / sizeof(float), 1024);
  // In huge pages like the weights (HugePageArena), so the roofline compares like with like.
  HugePageArena arena;
  float* const buffer = reinterpret_cast<float*>(arena.allocate(count * sizeof(float)));
  // Written by the threads that will read it (first touch places the pages near them).
  pool.run([&](int thread_index, int num_threads) {
    const size_t begin = count * thread_index / num_threads;
    const size_t end = count * (thread_index + 1) / num_threads;
    for (size_t i = begin; i < end; ++i) buffer[i] = static_cast<float>(i & 7);
  });
  std::atomic<uint32_t> sink{0};  // keeps the sums alive
  auto read_once = [&] {
    pool.run([&](int thread_index, int num_threads) {
      const size_t begin = count * thread_index / num_threads;
      const size_t end = count * (thread_index + 1) / num_threads;
      const float sum = sum_floats(buffer + begin, buffer + end);
      uint32_t bits;
      std::memcpy(&bits, &sum, sizeof(bits));
      sink.fetch_xor(bits, std::memory_order_relaxed);
    });
  };
  read_once();
  BandwidthMeasurement result;
  result.buffer_bytes = count * sizeof(float);
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

}  // namespace tachyon::kernels
