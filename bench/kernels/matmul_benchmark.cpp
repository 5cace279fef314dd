// kernels::matmul on SmolLM2-135M-shaped matrices, per weight type and kernel level, for decode
// (1 token), batched decode (2, 8, 32 tokens) and prefill (512 tokens) with 1 and 2 threads.
// Counters: weight_GB/s = weight bytes read per second (each call reads the matrix once);
// GFLOP/s = 2 * rows * cols * tokens per second. Matrices of 64 MiB and more are read from
// memory (copies, see kStreamedFrom), smaller ones mostly from the caches.
// Names: matmul/<type>/<level>/<rows>x<cols>/tokens:<n>/threads:<n>, and for the types that
// models repack at load (RepackedWeights: Q4_0..Q8_0, Q4_K, Q6_K, F16, BF16) the same with
// matmul/<type>-repacked/..., the layout decoding actually reads.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_allocator.h"
#include "core/dtype.h"
#include "core/huge_page_arena.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/repacked_weights.h"
#include "kernels/reference/block_layouts.h"

namespace tachyon::kernels {
namespace {

// Random blocks with finite, realistic scales (f16 d near 2^-7) wherever a scale lives. Speed
// does not depend on the values, but NaN/denormal scales could slow f32 math.
std::vector<uint8_t> random_weights(DType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(42);
  const DTypeInfo& info = dtype_info(type);
  const size_t num_blocks = static_cast<size_t>(rows * cols / info.block_elements);
  std::vector<uint8_t> bytes(num_blocks * info.block_bytes);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng());
  const uint16_t f16_scale = 0x2000;  // 2^-7
  auto put = [&](size_t offset, uint16_t value) { std::memcpy(&bytes[offset], &value, 2); };
  for (size_t b = 0; b < num_blocks; ++b) {
    const size_t base = b * info.block_bytes;
    switch (type) {
      case DType::kF32: {
        const float value = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
        std::memcpy(&bytes[base], &value, 4);
        break;
      }
      case DType::kF16:
      case DType::kBF16:
        put(base, type == DType::kF16 ? 0x3555 : 0x3eaa);  // ~1/3
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ4_1:
      case DType::kQ5_1:
        put(base, f16_scale);
        put(base + 2, f16_scale);
        break;
      case DType::kQ6_K:
        put(base + offsetof(reference::BlockQ6_K, d), f16_scale);
        break;
      default:  // Q4_0, Q5_0, Q8_0: d first
        put(base, f16_scale);
        break;
    }
  }
  return bytes;
}

ThreadPool& pool_with(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

// Matrices this large stand for the ones decoding streams from memory (an output matrix, or a
// layer of a model far larger than the caches): the benchmark cycles through copies of them
// totalling kStreamedBytes, so no call finds its weights in the L3 cache left by the last one.
constexpr size_t kStreamedFrom = size_t{64} << 20;
constexpr size_t kStreamedBytes = size_t{1} << 30;

void run_matmul(benchmark::State& state, DType type, KernelLevel level, int64_t rows, int64_t cols,
                int64_t tokens, int threads, bool repacked) {
  const std::vector<uint8_t> w = random_weights(type, rows, cols);
  AlignedVector<float> x(static_cast<size_t>(tokens * cols));  // as a model's activations
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : x) value = normal(rng);
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  const size_t copies = w.size() >= kStreamedFrom ? (kStreamedBytes + w.size() - 1) / w.size() : 1;
  HugePageArena arena;
  std::vector<WeightMatrix> matrices;
  for (size_t c = 0; c < copies; ++c) {
    WeightMatrix matrix{type, w.data(), rows, cols};
    // The decode prefetch distance a model streaming this many bytes per token would use.
    matrix.decode_prefetch = decode_prefetch_bytes(static_cast<int64_t>(copies * w.size()));
    if (repacked) {
      uint8_t* packed = arena.allocate(RepackedWeights::packed_bytes(matrix));
      RepackedWeights::repack_into(matrix, packed);
      matrix.packed = packed;
    } else if (c > 0) {
      uint8_t* data = arena.allocate(w.size());
      std::memcpy(data, w.data(), w.size());
      matrix.data = data;
    }
    matrices.push_back(matrix);
  }
  ThreadPool& pool = pool_with(threads);
  matmul_at_level(level, matrices[0], x.data(), tokens, y.data(), pool);  // warm-up: scratch grows
  size_t next = 0;
  for (auto _ : state) {
    matmul_at_level(level, matrices[next], x.data(), tokens, y.data(), pool);
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(w.size()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(rows * cols * tokens),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

struct Shape {
  int64_t rows;
  int64_t cols;
};

void register_all() {
  // SmolLM2-135M: attention q/o 576x576, FFN up/gate 1536x576, down 576x1536, tied output
  // 49152x576 (Q8_0 in the default Q4_1 file).
  const Shape shapes[] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  const DType types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                         DType::kF16,  DType::kBF16, DType::kF32,  DType::kQ4_K, DType::kQ6_K};
  // K-quants (Q4_K_M files: Q4_K + Q6_K) on a 2048-wide model's shapes: attention 2048x2048,
  // FFN up/gate 5632x2048 and down 2048x5632 (cols multiples of 256), and 32768x2048, past
  // the L3 cache (streamed from memory, like an output matrix).
  const Shape k_shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32768, 2048}};
  const DType k_types[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  auto is_k_type = [&](DType type) {
    for (DType k : k_types) {
      if (k == type) return true;
    }
    return false;
  };
  // Llama-3.2-1B-shaped Q4_0 and Q8_0 (the larger model): attention 2048x2048, FFN
  // 8192x2048 and 2048x8192, output 128256x2048 (streamed from memory).
  const Shape large_shapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
  std::vector<DType> all_types(std::begin(types), std::end(types));
  all_types.push_back(DType::kQ5_K);
  for (DType type : all_types) {
    for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAmx}) {
      if (!kernel_level_available(level)) continue;
      std::vector<Shape> type_shapes(std::begin(shapes), std::end(shapes));
      if (is_k_type(type)) type_shapes.assign(std::begin(k_shapes), std::end(k_shapes));
      if (type == DType::kQ4_0 || type == DType::kQ8_0) {
        type_shapes.insert(type_shapes.end(), std::begin(large_shapes), std::end(large_shapes));
      }
      for (const Shape& shape : type_shapes) {
        // K-quants need cols % 256 == 0 (they get their own shapes above).
        if (shape.cols % dtype_info(type).block_elements != 0) continue;
        const bool repackable = RepackedWeights::supports(WeightMatrix{type, nullptr, shape.rows,
                                                                       shape.cols});
        for (bool repacked : {false, true}) {
          if (repacked && !repackable) continue;
          for (int64_t tokens : {1, 2, 8, 32, 512}) {
            for (int threads : {1, 2}) {
              const std::string name =
                  "matmul/" + std::string(dtype_name(type)) + (repacked ? "-repacked/" : "/") +
                  std::string(kernel_level_name(level)) + "/" + std::to_string(shape.rows) + "x" +
                  std::to_string(shape.cols) + "/tokens:" + std::to_string(tokens) +
                  "/threads:" + std::to_string(threads);
              benchmark::RegisterBenchmark(name.c_str(), run_matmul, type, level, shape.rows,
                                           shape.cols, tokens, threads, repacked)
                  ->UseRealTime()
                  ->Unit(benchmark::kMicrosecond);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tachyon::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
