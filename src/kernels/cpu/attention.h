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

namespace tachyon::kernels {

// Online (flash-style) softmax over a sequence of key/value blocks: each call folds one block
// of `num_positions` positions into a running state, so attention over any context needs
// memory for one block only. For the `group` query heads sharing a KV head:
//   queries:           f32 [group, head_size]
//   keys_by_dimension: f32 [head_size, key_stride] (this block's keys, transposed)
//   values:            f32 [num_positions, head_size]
//   scores:            f32 [group, num_positions] scratch
//   running_max:       f32 [group]             start at -infinity
//   running_sum:       f32 [group]             start at 0
//   accumulator:       f32 [group, head_size]  start at 0 (unnormalised output)
// The result for a query depends only on its own blocks, in order: never on what else is
// being computed, which keeps a request's output the same alone or in a batch.
void attention_block_update(const float* queries, int group, int head_size, float scale,
                            int num_positions, const float* keys_by_dimension, int64_t key_stride,
                            const float* values, float* scores, float* running_max,
                            float* running_sum, float* accumulator);

// out = accumulator / running_sum, per head. out: f32 [group, head_size]
void attention_finish(const float* accumulator, const float* running_sum, int group,
                      int head_size, float* out);

}  // namespace tachyon::kernels
