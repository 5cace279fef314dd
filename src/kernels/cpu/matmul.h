// Matrix products against weights in their stored type, the bulk of every forward pass.
// Variants (scalar reference, AVX2, AVX-512 VNNI) are chosen once from the CPU's features.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {

// A weight matrix as stored in a model file: `rows` rows of `cols` elements of `type`, each
// row `row_bytes()` long, rows back to back. GGUF's shape is [cols, rows].
struct WeightMatrix {
  DType type = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  // The same weights repacked for the SIMD kernels (RepackedWeights), or null. When set, the
  // SIMD kernels read only these; the reference kernels read `data`.
  const uint8_t* packed = nullptr;
  // How many bytes ahead of their reads the decode kernels prefetch these weights: what
  // decode_prefetch_bytes() answered for the model holding them (DecoderWeights sets it); -1
  // (a matrix on its own): its answer for a working set that fits in the caches.
  int64_t decode_prefetch = -1;

  size_t row_bytes() const;
};

// How far ahead the decode kernels should prefetch the weights of a model that streams
// `working_set_bytes` per token, in bytes; 0: as tuned for AMD Zen 4's AVX-512 kernels, where
// the hardware prefetchers kept up and software prefetching only slowed decoding down (the
// K-quant tiles then prefetch two super-blocks ahead into L1); AMD at the AVX2 level
// kDecodePrefetchBytes (measured on Zen 4 forced to AVX2). On Intel CPUs (measured on a 2-core Xeon
// VM, where the hardware prefetchers alone fall behind) kDecodePrefetchBytes for a working set up
// to half the L3 cache, kDecodePrefetchFromMemoryBytes past it. TACHYON_DECODE_PREFETCH=<bytes>
// overrides it for every model (0 for the Zen 4 tuning).
int64_t decode_prefetch_bytes(int64_t working_set_bytes);

// True when matmul handles `type` (every type with a dequantizer does).
bool matmul_supports(DType type);

// y[t][r] = sum_c w[r][c] * x[t][c] for t < num_tokens, r < w.rows.
// x: f32 [num_tokens, w.cols] (contiguous), y: f32 [num_tokens, w.rows] (contiguous).
// Quantized weights take activations quantized on the fly to 8 bits (as llama.cpp does), so
// results differ from an f32 product by that rounding. Uses every thread of `pool`.
// y must not overlap x or w. Requires matmul_supports(w.type) and w.cols a multiple of the
// type's block size (CHECKed: loaders validate shapes first).
void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool);

// The same at an explicit level (tests and benchmarks); `level` must be available.
void matmul_at_level(KernelLevel level, const WeightMatrix& w, const float* x, int64_t num_tokens,
                     float* y, ThreadPool& pool);

// Several products of the same input (e.g. a layer's query, key and value projections): x is
// quantized once per activation format and the threads meet once for all of them instead of
// once per matrix. Every w has x's width (CHECKed); each y as in matmul(), results identical.
struct MatmulProduct {
  const WeightMatrix* w;
  float* y;  // f32 [num_tokens, w->rows]
};
// `epilogue`, if given, runs on each thread right after it computed its rows of every product,
// as epilogue(row_begin, row_end) (all products then have the same rows, CHECKed), while they
// are still in its cache: e.g. SwiGLU over a layer's gate and up rows. The thread's ranges
// are disjoint and cover [0, rows); each starts at a multiple of 16.
using RowEpilogue = FunctionRef<void(int64_t row_begin, int64_t row_end)>;
void matmul_many(std::span<const MatmulProduct> products, const float* x, int64_t num_tokens,
                 ThreadPool& pool, const RowEpilogue* epilogue = nullptr);
void matmul_many_at_level(KernelLevel level, std::span<const MatmulProduct> products,
                          const float* x, int64_t num_tokens, ThreadPool& pool,
                          const RowEpilogue* epilogue = nullptr);

// The same from an input the caller prepared for these products and quantized row by row
// (MatmulInput: e.g. each row right after its norm), at the input's level. Every product must
// be one the input serves (CHECKed); results identical to matmul_many from input.x().
class MatmulInput;
void matmul_many(std::span<const MatmulProduct> products, const MatmulInput& input,
                 ThreadPool& pool, const RowEpilogue* epilogue = nullptr);
// Products that each read their own prepared input (inputs[j] for products[j], all at one
// level; e.g. each chosen expert of a MoE layer on the tokens that chose it): one pass over
// the pool for all of them, results identical to one matmul_many per product. `epilogue` as
// in matmul_many (all products then have the same rows).
void matmul_each(std::span<const MatmulProduct> products,
                 std::span<const MatmulInput* const> inputs, ThreadPool& pool,
                 const RowEpilogue* epilogue = nullptr);

}  // namespace tachyon::kernels
