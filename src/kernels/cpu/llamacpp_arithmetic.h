// llama.cpp's arithmetic, operation for operation: the kernels behind `--numerics llama.cpp`,
// which makes tachyon's logits the same bits as llama.cpp's (0.3.36, its x86 CPU backend built
// for AVX2/AVX-512) on the models where that backend computes every product one row at a time
// (Q4_1 layer weights; Q8_0 only for single-token products such as the output layer). What
// they reproduce, because each changes the last bits and 8-bit activations turn last bits
// into visible logit differences:
//   - dot products in 8 float lanes, lane j accumulating the integer sums of elements
//     4j..4j+3 of each block with a fused multiply-add, then a fixed pairwise lane sum;
//   - RMSNorm's sum of squares over f32 products, in double;
//   - SwiGLU with ggml's vectorised exp (a polynomial, 16 lanes at a time);
//   - attention as one online-softmax pass per query row: f16 query and keys, values
//     accumulated in f16 (rounded after every position), glibc's expf.
// Slower than tachyon's own kernels (which sum whole blocks exactly and tile the attention):
// a reference mode for checking against llama.cpp, not for serving.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace tachyon::kernels::llamacpp {

// Weight types whose products are reproduced (Q4_1 and Q8_0).
bool matmul_supports(DType type);

// y[t][r] = w[r] . x[t] as llama.cpp's vec_dot computes it, activations quantized to Q8_1
// (Q4_1) or Q8_0 (Q8_0). x: f32 [num_tokens, w.cols]; y: f32 [num_tokens, w.rows].
void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y,
            ThreadPool& pool);
// The same with the portable loops (kReference) or AVX2 (any other level; the same bits).
void matmul_at_level(KernelLevel level, const WeightMatrix& w, const float* x,
                     int64_t num_tokens, float* y, ThreadPool& pool);

// out = x / rms(x) * weight, the sum of squares of f32 products accumulated in double.
// x, weight, out: f32 [size]; out may be x.
void rms_norm(const float* x, const float* weight, int size, float eps, float* out);

// out = silu(gate) * up. gate, up, out: f32 [size]; out may alias gate.
void swiglu(const float* gate, const float* up, int64_t size, float* out);

// Rotates `num_heads` heads of `head_size` (one token) by cos/sin f32 [head_size/2]:
// x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos, each with one fused multiply-add as the
// compiler fused them in llama.cpp's build; pairs adjacent or (NeoX) half a head apart.
void rope_rotate(float* heads, int num_heads, int head_size, const float* cos, const float* sin,
                 bool adjacent_pairs);

// One query row against `count` positions of one KV head: softmax(q·K · scale) V.
// query: f32 [head_size]; keys, values: f32 [count, head_size] holding f16 values (the KV
// cache's); out: f32 [head_size].
// llama.cpp's flash attention takes one of two paths by the number of query rows in the batch:
//  - from kTiledAttentionRows rows on, attention_row_tiled: f32 query, positions in tiles of
//    64 with the vectorised exp, f32 accumulation;
//  - a single row against kSplitAttentionCells cache cells or more (llama.cpp counts cells in
//    steps of 256, `cells` below), attention_row_split: the cells split into one chunk per
//    thread, ceil(cells / threads) each, each chunk as attention_row, then combined;
//  - otherwise attention_row: f16 query, f16 accumulation, one position at a time.
inline constexpr int kTiledAttentionRows = 64;
inline constexpr int kSplitAttentionCells = 512;
// The cells llama.cpp's cache attends over when `used` positions are filled, in a cache of
// `capacity`.
inline int attention_cells(int used, int capacity) {
  return std::min(capacity, std::max(256, (used + 255) / 256 * 256));
}
void attention_row(const float* query, const float* keys, const float* values, int count,
                   int head_size, float scale, float* out);
void attention_row_tiled(const float* query, const float* keys, const float* values, int count,
                         int head_size, float scale, float* out);
void attention_row_split(const float* query, const float* keys, const float* values, int count,
                         int head_size, float scale, int chunk_size, float* out);

}  // namespace tachyon::kernels::llamacpp
