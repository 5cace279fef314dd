// f32 weights to the 32-value block types, as the PyPI `gguf` package (and ggml's reference
// quantize_row_*_ref) computes them, byte for byte: what `--quantize` uses to serve an F32,
// F16, BF16 or FP8 checkpoint without a conversion step.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon::reference {

// True for the types quantize_weights writes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the K-quants
// Q4_K and Q6_K (quantize_weights_k.cpp: ggml's reference algorithm, which the gguf package
// lacks).
bool can_quantize_weights(DType type);

// Encodes `num_elements` f32 values (a multiple of the type's block: 32, or 256 for the
// K-quants) as `type` blocks into `dst`.
Status quantize_weights(DType type, const float* src, int64_t num_elements, void* dst);

// Q4_K or Q6_K: `num_blocks` super-blocks of 256 values (quantize_weights_k.cpp).
void quantize_k_super_blocks(DType type, const float* src, int64_t num_blocks, uint8_t* dst);

}  // namespace tachyon::reference
