#include "kernels/reference/matmul_reference.h"

#include <string>
#include <vector>

#include "kernels/reference/dequantize.h"
#include "kernels/reference/dot_products.h"
#include "kernels/reference/dot_products_k.h"
#include "kernels/reference/quantize_activations.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::reference {

Status matmul(DType type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
              int64_t num_tokens, float* y) {
  const std::optional<DTypeInfo> info = dtype_info(static_cast<uint32_t>(type));
  if (!info || !info->can_dequantize) {
    return unsupported("reference matmul: no kernel for type id " +
                       std::to_string(static_cast<uint32_t>(type)));
  }
  if (rows < 0 || num_tokens < 0 || cols < 0 || cols % info->block_elements != 0) {
    return invalid_argument("reference matmul: cols " + std::to_string(cols) +
                            " is not a multiple of the " + std::string(info->name) +
                            " block size " + std::to_string(info->block_elements));
  }
  const int64_t row_bytes = cols / info->block_elements * info->block_bytes;
  if (has_q8_dot(type)) {
    const int64_t blocks = cols / kQ8Block;
    std::vector<int8_t> qs(static_cast<size_t>(num_tokens * cols));
    std::vector<float> d(static_cast<size_t>(num_tokens * blocks));
    std::vector<float> s(static_cast<size_t>(num_tokens * blocks));
    quantize_activations_q8(x, num_tokens, cols, qs.data(), d.data(), s.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        y[t * rows + r] = dot_q8(type, w + r * row_bytes, qs.data() + t * cols,
                                 d.data() + t * blocks, s.data() + t * blocks, cols);
      }
    }
    return Status::ok_status();
  }
  if (has_q8_k_dot(type) && cols % kQ8KBlock == 0) {
    const int64_t blocks = cols / kQ8KBlock;
    const int64_t groups = cols / kQ8KSumGroup;
    std::vector<int8_t> qs(static_cast<size_t>(num_tokens * cols));
    std::vector<float> d(static_cast<size_t>(num_tokens * blocks));
    std::vector<int16_t> bsums(static_cast<size_t>(num_tokens * groups));
    quantize_activations_q8_k(x, num_tokens, cols, qs.data(), d.data(), bsums.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        y[t * rows + r] = dot_q8_k(type, w + r * row_bytes, qs.data() + t * cols,
                                   d.data() + t * blocks, bsums.data() + t * groups, cols);
      }
    }
    return Status::ok_status();
  }
  if (has_float_dot(type)) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        y[t * rows + r] = dot_float(type, w + r * row_bytes, x + t * cols, cols);
      }
    }
    return Status::ok_status();
  }
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    Status status = dequantize(type, w + r * row_bytes, row.data(), cols);
    if (!status.ok()) return status;
    for (int64_t t = 0; t < num_tokens; ++t) {
      y[t * rows + r] = dot_f32(row.data(), x + t * cols, cols);
    }
  }
  return Status::ok_status();
}

}  // namespace tachyon::reference
