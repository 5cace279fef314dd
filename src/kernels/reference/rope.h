// Scalar oracle for kernels::rope_rotate, in double.
#pragma once

namespace tachyon::reference {

void rope_rotate(float* heads, int num_heads, int head_size, const float* cos, const float* sin,
                 bool adjacent_pairs);

}  // namespace tachyon::reference
