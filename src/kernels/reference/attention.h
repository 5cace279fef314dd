// Scalar oracle for the attention kernels (kernels/cpu/attention.h): the textbook
// softmax(q·Kᵀ·scale)·V in double, with keys in plain row order.
#pragma once

#include <cstdint>

namespace tachyon::reference {

// queries: f32 [group, head_size]; keys, values: f32 [num_positions, head_size];
// out: f32 [group, head_size]
void attention_group(const float* queries, int group, int head_size, float scale,
                     int num_positions, const float* keys, const float* values, float* out);

}  // namespace tachyon::reference
