// Rotary position embedding's rotation: pairs of dimensions of each head turned by the angle
// whose cos and sin are given, compiled for AVX-512, AVX2 and plain x86-64 (the best chosen at
// load time); kernels/reference/rope.h is its oracle.
#pragma once

namespace tachyon::kernels {

// `adjacent_pairs`: rotate (2j, 2j+1), GGUF's llama layout; otherwise (j, j + head_size/2),
// NeoX's layout.
// heads: f32 [num_heads, head_size], rotated in place; cos, sin: f32 [head_size / 2]
void rope_rotate(float* heads, int num_heads, int head_size, const float* cos, const float* sin,
                 bool adjacent_pairs);

}  // namespace tachyon::kernels
