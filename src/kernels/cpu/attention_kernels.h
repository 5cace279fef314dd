// Per-level entry points behind kernels::attention_span_update (internal to kernels/cpu, its
// tests and benchmarks). The AVX-512 and AVX2 levels' hand-written kernels live in cpu/avx512/
// and cpu/avx2/ with their own -m flags; attention.cpp picks the active level's at run time and
// otherwise (head sizes a kernel does not take, the portable level) runs its portable kernel,
// compiled for each level. Every level gives each row the same bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

namespace tachyon::kernels {

// attention_span_update at an explicit level (`level` must be available): kAvx512 and kAvx2
// run their hand-written kernel where it supports the head size, the portable kernel
// (compiled for that level) otherwise.
void attention_span_update_at_level(KernelLevel level, const float* queries, int64_t token_stride,
                                    int num_tokens, int group, int head_size, float scale,
                                    const int* visible, const float* keys_by_dimension,
                                    int64_t key_stride, const float* values, float* scores,
                                    int64_t score_stride, float* running_max, float* running_sum,
                                    float* accumulator);

// attention_span_update_f16 at an explicit level whose kernel reads f16 (see
// attention_reads_f16_at_level).
bool attention_reads_f16_at_level(KernelLevel level, int head_size);
void attention_span_update_f16_at_level(KernelLevel level, const float* queries,
                                        int64_t token_stride, int num_tokens, int group,
                                        int head_size, float scale, const int* visible,
                                        const uint16_t* const* key_groups, int64_t key_stride,
                                        const uint16_t* const* value_groups, float* scores,
                                        int64_t score_stride, float* running_max,
                                        float* running_sum, float* accumulator);

// attention_span_update_q8 at an explicit level (every level reads q8).
bool attention_reads_q8_at_level(KernelLevel level, int head_size);
void attention_span_update_q8_at_level(KernelLevel level, const Q8Queries& queries,
                                       int num_tokens, int group, int head_size,
                                       const int* visible, const Q8SpanGroups& span, float* scores,
                                       int64_t score_stride, float* running_max,
                                       float* running_sum, float* accumulator);

// Each level's hand-written kernel (cpu/avx512/, cpu/avx2/), built with its own -m flags.
#define TACHYON_LEVEL_ATTENTION_KERNELS                                                        \
  /* True when this level's kernel handles heads of `head_size`. */                            \
  bool attention_span_update_supports(int head_size);                                          \
  /* As kernels::attention_span_update (see attention.h), same bits. */                        \
  void attention_span_update(const float* queries, int64_t token_stride, int num_tokens,       \
                             int group, int head_size, float scale, const int* visible,        \
                             const float* keys_by_dimension, int64_t key_stride,               \
                             const float* values, float* scores, int64_t score_stride,         \
                             float* running_max, float* running_sum, float* accumulator);      \
  /* The same with keys and values as f16 bits in groups of positions */                       \
  /* (kernels::attention_span_update_f16). */                                                  \
  void attention_span_update_f16(const float* queries, int64_t token_stride, int num_tokens,   \
                                 int group, int head_size, float scale, const int* visible,    \
                                 const uint16_t* const* key_groups, int64_t key_stride,        \
                                 const uint16_t* const* value_groups, float* scores,           \
                                 int64_t score_stride, float* running_max, float* running_sum, \
                                 float* accumulator);                                          \
  /* The same with keys and values as q8 (kernels::attention_span_update_q8). */               \
  void attention_span_update_q8(const Q8Queries& queries, int num_tokens, int group,           \
                                int head_size, const int* visible, const Q8SpanGroups& span,   \
                                float* scores, int64_t score_stride, float* running_max,       \
                                float* running_sum, float* accumulator);
namespace avx2 {
TACHYON_LEVEL_ATTENTION_KERNELS
}  // namespace avx2
namespace avx512 {
TACHYON_LEVEL_ATTENTION_KERNELS
}  // namespace avx512
#undef TACHYON_LEVEL_ATTENTION_KERNELS

}  // namespace tachyon::kernels
