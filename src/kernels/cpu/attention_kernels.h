// Per-level entry points behind kernels::attention_span_update (internal to kernels/cpu, its
// tests and benchmarks). The AVX-512 level lives in cpu/avx512/ with its own -m flags;
// attention.cpp picks it at run time and otherwise runs its portable kernel (compiled for AVX2
// and plain x86-64 as well). Every level gives each row the same bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace tachyon::kernels {

// attention_span_update at an explicit level (`level` must be available): kAvx512 runs the
// AVX-512 kernel where it supports the head size, every other level the portable kernel.
void attention_span_update_at_level(KernelLevel level, const float* queries, int64_t token_stride,
                                    int num_tokens, int group, int head_size, float scale,
                                    const int* visible, const float* keys_by_dimension,
                                    int64_t key_stride, const float* values, float* scores,
                                    int64_t score_stride, float* running_max, float* running_sum,
                                    float* accumulator);

namespace avx512 {
// True when the AVX-512 kernel handles heads of `head_size`.
bool attention_span_update_supports(int head_size);
// As kernels::attention_span_update (see attention.h), same bits.
void attention_span_update(const float* queries, int64_t token_stride, int num_tokens, int group,
                           int head_size, float scale, const int* visible,
                           const float* keys_by_dimension, int64_t key_stride, const float* values,
                           float* scores, int64_t score_stride, float* running_max,
                           float* running_sum, float* accumulator);
// The same with keys and values as f16 bits in groups of positions
// (kernels::attention_span_update_f16).
void attention_span_update_f16(const float* queries, int64_t token_stride, int num_tokens,
                               int group, int head_size, float scale, const int* visible,
                               const uint16_t* const* key_groups, int64_t key_stride,
                               const uint16_t* const* value_groups, float* scores,
                               int64_t score_stride, float* running_max, float* running_sum,
                               float* accumulator);
}  // namespace avx512

}  // namespace tachyon::kernels
