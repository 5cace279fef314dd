// The inner step of attention: one token's queries against a KV head's keys and values.
#pragma once

#include <cstdint>

namespace tachyon::kernels {

// For the `group` query heads that share one KV head: scores q·k·scale for every one of
// `num_positions` positions, softmax, weighted sum of values. Loops run along contiguous
// memory (keys come transposed), and the function is compiled for AVX-512, AVX2 and plain
// x86-64, the best chosen at load time. kernels/reference/attention.h is its oracle.
//   queries:           f32 [group, head_size]
//   keys_by_dimension: f32 [head_size, key_stride], row d = dimension d of every position
//   values:            f32 [num_positions, head_size]
//   scores:            f32 [group, num_positions] scratch
//   out:               f32 [group, head_size]
void attention_group(const float* queries, int group, int head_size, float scale,
                     int num_positions, const float* keys_by_dimension, int64_t key_stride,
                     const float* values, float* scores, float* out);

}  // namespace tachyon::kernels
