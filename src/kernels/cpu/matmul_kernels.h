// Per-level entry points behind kernels::matmul (internal to kernels/cpu, its tests and
// benchmarks). Each level lives in its own translation unit built with its own -m flags
// (cpu/avx2/, cpu/avx512/); matmul.cpp picks one at run time.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/reference/quantize_activations.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::kernels {

// matmul_rows prepares up to this many weight rows at a time (unpacked to int8 or converted to
// f32) in the caller's scratch, then sweeps all tokens over them. Threads split rows in
// multiples of it so no panel straddles two threads.
inline constexpr int64_t kPanelRows = 16;

// Decoding streams each weight once, and on Intel the hardware prefetchers alone may keep too
// few lines in flight (seen on a 2-core Xeon VM: each thread read ~12 of the 16 GB/s a plain
// read loop gets). There the decode kernels ask for every line of the weights this far ahead of
// the one they read, into L2 (decode_prefetch_bytes). A model whose weights largely stay in the
// L3 cache wants it far: the default model's tg128 went from ~230 to ~370-420 tokens/s with
// 8-16 KiB (2 KiB: ~270, 4 KiB: ~350). One streamed from memory wants it near, the L2
// streamer covering the rest: 2-4 KiB made the 1B-shaped models decode 4-8% faster than 12 KiB
// (Q4_0 tg32 ~39 against ~37, Q8_0 22.2 against 20.9, F16 of the default model 101 against 95),
// with a narrow best near 3 KiB (medians of 6-8 alternating runs, tg32 at 1 / 2 / 2.5 / 3 / 4
// KiB: 1B Q4_0 35.7 / 38.6 / 40.4 / 40.6 / 37.6; F16 at 2 / 3 / 4 KiB: 98 / 107 / 103).
inline constexpr int64_t kDecodePrefetchBytes = 12 * 1024;
inline constexpr int64_t kDecodePrefetchFromMemoryBytes = 3 * 1024;

// The distance the decode kernels use for `w` (its decode_prefetch, or the process default).
inline int64_t decode_prefetch_of(const WeightMatrix& w) {
  return w.decode_prefetch >= 0 ? w.decode_prefetch : decode_prefetch_bytes(0);
}

// Floats of per-thread scratch matmul_rows needs for rows of `cols` values and `num_tokens`
// tokens (the Q8_0 path keeps one int32 per token and 32-value block; the amx level's a ring of
// 8 tiles of 16 x 16 int32 and 16 tokens' padded activations).
inline int64_t matmul_scratch_floats(int64_t cols, int64_t num_tokens) {
  return kPanelRows * (cols + 16) + 64 + num_tokens * (cols / 32) + 8 * 256;
}

// The generic fallback's way to the reference dequantizer: defined in matmul.cpp (generic
// flags) so the SIMD translation units never instantiate Status or std::string code.
// Aborts on failure (matmul_supports was checked before).
void dequantize_for_fallback(DType type, const uint8_t* src, float* dst, int64_t num_elements);

#define TACHYON_DECLARE_MATMUL_LEVEL(level)                                                     \
  namespace level {                                                                             \
  /* Same math and layout as reference::quantize_activations_q8, bit for bit. */                \
  void quantize_activations(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs,       \
                            float* d, float* s);                                                \
  /* Rows [row_begin, row_end) of y = w x for all tokens. acts: x quantized (Q4_0..Q8_0         \
     weights only); x: f32 [num_tokens, w.cols]; y: f32 [num_tokens, w.rows];                   \
     scratch: f32 [matmul_scratch_floats(w.cols)], this thread's own. */                        \
  void matmul_rows(const WeightMatrix& w, const reference::Q8Activations& acts, const float* x, \
                   int64_t num_tokens, float* y, int64_t row_begin, int64_t row_end,            \
                   float* scratch);                                                             \
  /* Same math and layout as reference::quantize_activations_q8_k, bit for bit. */              \
  void quantize_activations_k(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs,     \
                              float* d, int16_t* bsums);                                        \
  /* As matmul_rows for Q4_K/Q5_K/Q6_K weights (cols % 256 == 0) against 256-block acts. */     \
  void matmul_rows_k(const WeightMatrix& w, const reference::Q8KActivations& acts, float* y,    \
                     int64_t row_begin, int64_t row_end, float* scratch);                       \
  }

TACHYON_DECLARE_MATMUL_LEVEL(avx2)
TACHYON_DECLARE_MATMUL_LEVEL(avx512)
TACHYON_DECLARE_MATMUL_LEVEL(amx)

#undef TACHYON_DECLARE_MATMUL_LEVEL

}  // namespace tachyon::kernels
