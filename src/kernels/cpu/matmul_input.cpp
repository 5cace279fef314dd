#include "kernels/cpu/matmul_input.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/reference/dot_products.h"
#include "kernels/reference/dot_products_k.h"

namespace tachyon::kernels {
namespace {

// Tokens per quantization job: below two of these, one thread quantizes (a decode step's few
// hundred values take well under a microsecond, less than waking the pool).
constexpr int64_t kQuantizeGrainTokens = 8;

template <typename T>
T* grown(std::vector<T>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

}  // namespace

MatmulInput::Format MatmulInput::format_of(const WeightMatrix& w) {
  // K-quants take 256-value blocks; at any other width they go through the f32 fallback.
  if (reference::has_q8_k_dot(w.type)) {
    return w.cols % reference::kQ8KBlock == 0 ? Format::kQ8K : Format::kFloat;
  }
  return reference::has_q8_dot(w.type) ? Format::kQ8 : Format::kFloat;
}

void MatmulInput::prepare(KernelLevel level, std::span<const MatmulProduct> products,
                          const float* x, int64_t num_tokens) {
  TACHYON_CHECK(kernel_level_available(level));
  TACHYON_CHECK(num_tokens >= 0);
  level_ = level;
  x_ = x;
  num_tokens_ = num_tokens;
  cols_ = products.empty() ? 0 : products[0].w->cols;
  takes_q8_ = false;
  takes_q8_k_ = false;
  for (const MatmulProduct& product : products) {
    TACHYON_CHECK(product.w->cols == cols_);
    if (level == KernelLevel::kReference) continue;
    const Format format = format_of(*product.w);
    takes_q8_ = takes_q8_ || format == Format::kQ8;
    takes_q8_k_ = takes_q8_k_ || format == Format::kQ8K;
  }
  q8_ = {};
  q8_k_ = {};
  if (takes_q8_) {
    const int64_t blocks = num_tokens * (cols_ / reference::kQ8Block);
    q8_ = reference::Q8Activations{grown(q8_qs_, num_tokens * cols_), grown(q8_d_, blocks),
                                   grown(q8_s_, blocks), num_tokens, cols_};
  }
  if (takes_q8_k_) {
    q8_k_ = reference::Q8KActivations{
        grown(q8_k_qs_, num_tokens * cols_),
        grown(q8_k_d_, num_tokens * (cols_ / reference::kQ8KBlock)),
        grown(q8_k_bsums_, num_tokens * (cols_ / reference::kQ8KSumGroup)), num_tokens, cols_};
  }
}

void MatmulInput::quantize_rows(int64_t begin, int64_t end) {
  TACHYON_CHECK(0 <= begin && end <= num_tokens_);
  if (begin >= end) return;
  const int64_t count = end - begin;
  const float* x = x_ + begin * cols_;
  if (takes_q8_) {
    const int64_t blocks = cols_ / reference::kQ8Block;
    // The buffers are this object's own: q8_'s pointers are const views of them.
    int8_t* qs = q8_qs_.data() + begin * cols_;
    float* d = q8_d_.data() + begin * blocks;
    float* s = q8_s_.data() + begin * blocks;
    if (level_ == KernelLevel::kAvx512) {
      avx512::quantize_activations(x, count, cols_, qs, d, s);
    } else {
      avx2::quantize_activations(x, count, cols_, qs, d, s);
    }
  }
  if (takes_q8_k_) {
    const int64_t blocks = cols_ / reference::kQ8KBlock;
    const int64_t groups = cols_ / reference::kQ8KSumGroup;
    int8_t* qs = q8_k_qs_.data() + begin * cols_;
    float* d = q8_k_d_.data() + begin * blocks;
    int16_t* bsums = q8_k_bsums_.data() + begin * groups;
    if (level_ == KernelLevel::kAvx512) {
      avx512::quantize_activations_k(x, count, cols_, qs, d, bsums);
    } else {
      avx2::quantize_activations_k(x, count, cols_, qs, d, bsums);
    }
  }
}

void MatmulInput::quantize_all(ThreadPool& pool) {
  if (!takes_q8_ && !takes_q8_k_) return;
  if (num_tokens_ < 2 * kQuantizeGrainTokens || pool.num_threads() == 1) {
    return quantize_rows(0, num_tokens_);
  }
  pool.parallel_for(num_tokens_, kQuantizeGrainTokens,
                    [this](int64_t begin, int64_t end) { quantize_rows(begin, end); });
}

bool MatmulInput::serves(const WeightMatrix& w) const {
  if (w.cols != cols_) return false;
  if (level_ == KernelLevel::kReference) return true;
  switch (format_of(w)) {
    case Format::kQ8:
      return takes_q8_;
    case Format::kQ8K:
      return takes_q8_k_;
    case Format::kFloat:
      return true;
  }
  return false;
}

}  // namespace tachyon::kernels
