// Scalar dequantize-to-f32 for every GGUF block layout tachyon reads: the oracle that SIMD
// and CUDA kernels are checked against.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon::reference {

// Decodes `num_elements` values of `type` starting at `src` into `dst`.
// num_elements must be a multiple of the type's block size; `src` holds
// num_elements / block_elements * block_bytes bytes (no alignment needed).
Status dequantize(DType type, const void* src, float* dst, int64_t num_elements);

}  // namespace tachyon::reference
