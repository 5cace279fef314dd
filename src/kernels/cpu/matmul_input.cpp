#include "kernels/cpu/matmul_input.h"

#include <algorithm>
#include <cstring>

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

// Rows of f32 values (`cols` each) quantized at `level` into the 32-value blocks' arrays.
void quantize_q8(KernelLevel level, const float* x, int64_t rows, int64_t cols, int8_t* qs,
                 float* d, float* s) {
  if (level >= KernelLevel::kAvx512) {
    avx512::quantize_activations(x, rows, cols, qs, d, s);
  } else {
    avx2::quantize_activations(x, rows, cols, qs, d, s);
  }
}

// The same into the 256-value blocks' arrays.
void quantize_q8_k(KernelLevel level, const float* x, int64_t rows, int64_t cols, int8_t* qs,
                   float* d, int16_t* bsums) {
  if (level >= KernelLevel::kAvx512) {
    avx512::quantize_activations_k(x, rows, cols, qs, d, bsums);
  } else {
    avx2::quantize_activations_k(x, rows, cols, qs, d, bsums);
  }
}

// `rows` rows of `width` bytes at `from` (back to back) into `to` (rows `stride` bytes apart).
void copy_rows(const void* from, int64_t rows, int64_t width, void* to, int64_t stride) {
  const auto* source = static_cast<const std::byte*>(from);
  auto* target = static_cast<std::byte*>(to);
  for (int64_t row = 0; row < rows; ++row) {
    std::memcpy(target + row * stride, source + row * width, static_cast<size_t>(width));
  }
}

// A column block's arrays, one after another: for each format taken, its values (int8
// [rows, width]) and then its scales (and sums) in the same row-major form.
struct BlockLayout {
  int8_t* q8_qs = nullptr;
  float* q8_d = nullptr;
  float* q8_s = nullptr;
  int8_t* q8_k_qs = nullptr;
  float* q8_k_d = nullptr;
  int16_t* q8_k_bsums = nullptr;
  int64_t bytes = 0;

  BlockLayout(bool q8, bool q8_k, int64_t rows, int64_t width, std::byte* base) {
    // Every part is a multiple of 4 bytes (width is a multiple of the blocks), so each stays
    // aligned for its type.
    auto take = [&](int64_t part_bytes) {
      std::byte* part = base == nullptr ? nullptr : base + bytes;
      bytes += part_bytes;
      return part;
    };
    if (q8) {
      const int64_t blocks = rows * (width / reference::kQ8Block);
      q8_qs = reinterpret_cast<int8_t*>(take(rows * width));
      q8_d = reinterpret_cast<float*>(take(blocks * static_cast<int64_t>(sizeof(float))));
      q8_s = reinterpret_cast<float*>(take(blocks * static_cast<int64_t>(sizeof(float))));
    }
    if (q8_k) {
      q8_k_qs = reinterpret_cast<int8_t*>(take(rows * width));
      q8_k_d = reinterpret_cast<float*>(
          take(rows * (width / reference::kQ8KBlock) * static_cast<int64_t>(sizeof(float))));
      q8_k_bsums = reinterpret_cast<int16_t*>(
          take(rows * (width / reference::kQ8KSumGroup) * static_cast<int64_t>(sizeof(int16_t))));
    }
  }
};

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
  takes_float_ = level == KernelLevel::kReference;
  for (const MatmulProduct& product : products) {
    TACHYON_CHECK(product.w->cols == cols_);
    if (level == KernelLevel::kReference) continue;
    const Format format = format_of(*product.w);
    takes_q8_ = takes_q8_ || format == Format::kQ8;
    takes_q8_k_ = takes_q8_k_ || format == Format::kQ8K;
    takes_float_ = takes_float_ || format == Format::kFloat;
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
  TACHYON_CHECK(x_ != nullptr);
  const float* x = x_ + begin * cols_;
  if (takes_q8_) {
    const int64_t blocks = cols_ / reference::kQ8Block;
    // The buffers are this object's own: q8_'s pointers are const views of them.
    quantize_q8(level_, x, count, cols_, q8_qs_.data() + begin * cols_,
                q8_d_.data() + begin * blocks, q8_s_.data() + begin * blocks);
  }
  if (takes_q8_k_) {
    quantize_q8_k(level_, x, count, cols_, q8_k_qs_.data() + begin * cols_,
                  q8_k_d_.data() + begin * (cols_ / reference::kQ8KBlock),
                  q8_k_bsums_.data() + begin * (cols_ / reference::kQ8KSumGroup));
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

int64_t MatmulInput::column_unit() const {
  if (takes_float_ || !(takes_q8_ || takes_q8_k_)) return 0;
  return takes_q8_k_ ? reference::kQ8KBlock : reference::kQ8Block;
}

int64_t MatmulInput::block_bytes(int64_t width) const {
  return BlockLayout(takes_q8_, takes_q8_k_, num_tokens_, width, nullptr).bytes;
}

void MatmulInput::quantize_block(const float* x, int64_t width, std::byte* block,
                                 ThreadPool& pool) const {
  const int64_t unit = column_unit();
  TACHYON_CHECK(unit > 0 && width % unit == 0);
  const BlockLayout layout(takes_q8_, takes_q8_k_, num_tokens_, width, block);
  auto rows = [&](int64_t begin, int64_t end) {
    const float* from = x + begin * width;
    if (takes_q8_) {
      const int64_t blocks = width / reference::kQ8Block;
      quantize_q8(level_, from, end - begin, width, layout.q8_qs + begin * width,
                  layout.q8_d + begin * blocks, layout.q8_s + begin * blocks);
    }
    if (takes_q8_k_) {
      quantize_q8_k(level_, from, end - begin, width, layout.q8_k_qs + begin * width,
                    layout.q8_k_d + begin * (width / reference::kQ8KBlock),
                    layout.q8_k_bsums + begin * (width / reference::kQ8KSumGroup));
    }
  };
  if (num_tokens_ < 2 * kQuantizeGrainTokens || pool.num_threads() == 1) {
    return rows(0, num_tokens_);
  }
  pool.parallel_for(num_tokens_, kQuantizeGrainTokens, rows);
}

void MatmulInput::place_block(const std::byte* block, int64_t width, int64_t column) {
  const int64_t unit = column_unit();
  TACHYON_CHECK(unit > 0 && width % unit == 0 && column % unit == 0 && column + width <= cols_);
  // The layout only reads the block (BlockLayout hands out mutable pointers for quantize_block).
  const BlockLayout layout(takes_q8_, takes_q8_k_, num_tokens_, width,
                           const_cast<std::byte*>(block));
  const int64_t rows = num_tokens_;
  if (takes_q8_) {
    const auto scale_bytes = static_cast<int64_t>(sizeof(float));
    const int64_t blocks = cols_ / reference::kQ8Block;
    const int64_t first = column / reference::kQ8Block;
    const int64_t count = width / reference::kQ8Block;
    copy_rows(layout.q8_qs, rows, width, q8_qs_.data() + column, cols_);
    copy_rows(layout.q8_d, rows, count * scale_bytes, q8_d_.data() + first, blocks * scale_bytes);
    copy_rows(layout.q8_s, rows, count * scale_bytes, q8_s_.data() + first, blocks * scale_bytes);
  }
  if (takes_q8_k_) {
    const auto scale_bytes = static_cast<int64_t>(sizeof(float));
    const auto sum_bytes = static_cast<int64_t>(sizeof(int16_t));
    const int64_t blocks = cols_ / reference::kQ8KBlock;
    const int64_t groups = cols_ / reference::kQ8KSumGroup;
    copy_rows(layout.q8_k_qs, rows, width, q8_k_qs_.data() + column, cols_);
    copy_rows(layout.q8_k_d, rows, width / reference::kQ8KBlock * scale_bytes,
              q8_k_d_.data() + column / reference::kQ8KBlock, blocks * scale_bytes);
    copy_rows(layout.q8_k_bsums, rows, width / reference::kQ8KSumGroup * sum_bytes,
              q8_k_bsums_.data() + column / reference::kQ8KSumGroup, groups * sum_bytes);
  }
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
