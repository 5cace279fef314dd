// f32 weights to the 32-value block types, as the PyPI `gguf` package (and ggml's reference
// quantize_row_*_ref) computes them, byte for byte: what `--quantize` uses to serve an F32,
// F16, BF16 or FP8 checkpoint without a conversion step.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon::reference {

// True for the types quantize_weights writes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
bool can_quantize_weights(DType type);

// Encodes `num_elements` f32 values (a multiple of 32) as `type` blocks into `dst`
// (num_elements / 32 blocks of the type's size).
Status quantize_weights(DType type, const float* src, int64_t num_elements, void* dst);

}  // namespace tachyon::reference
