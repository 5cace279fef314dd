// The input of a set of matrix products in the forms their kernels read: the f32 rows and, for
// quantized weights, the rows' 8-bit quantization (32-value blocks, or 256-value blocks for
// K-quants; each format once, however many products read it).
//
// Whoever produces the rows can quantize each one as soon as it is final, while it is still in
// cache: a layer's RMSNorm quantizes each token's normalised row right after writing it, so the
// activations are read once and matmul_many does not need a pass (and a meeting of the
// threads) of its own to quantize them. The bits are the same as when matmul_many quantizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/reference/quantize_activations.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::kernels {

class MatmulInput {
 public:
  // Readies the input for x (f32 [num_tokens, cols], the caller's; a row must be final before
  // it is quantized) as read by `products` at `level`, which must be available. All products
  // take rows of the same width (CHECKed). The buffers only grow, so steady-state use
  // allocates nothing. (The reference level quantizes inside its oracle: nothing to do here.)
  void prepare(KernelLevel level, std::span<const MatmulProduct> products, const float* x,
               int64_t num_tokens);

  // Quantizes rows [begin, end) of x into every format the products take. Threads may
  // quantize disjoint ranges at once.
  void quantize_rows(int64_t begin, int64_t end);
  // Every row, on all of pool's threads when there are enough of them to share.
  void quantize_all(ThreadPool& pool);

  // Tensor parallelism: the quantized forms assembled from column blocks that processes
  // quantized apart, each its own columns, so that no process quantizes the others' values and
  // the exchange moves 8-bit values instead of f32 ones. The bits are the same as quantize_rows
  // over the whole rows, since every quantization block lies within one column block: blocks
  // start only at multiples of column_unit(), which is 0 when a product reads the f32 rows
  // (then x must be the whole rows, quantized as above). x may be nullptr otherwise.
  int64_t column_unit() const;
  // The bytes of a `width`-column block of num_tokens() rows in the formats the products take.
  int64_t block_bytes(int64_t width) const;
  // x (f32 [num_tokens(), width], a block of the columns) quantized into `block`
  // (block_bytes(width) bytes, laid out by this class), on the pool's threads.
  void quantize_block(const float* x, int64_t width, std::byte* block, ThreadPool& pool) const;
  // A block from quantize_block (any process's) copied in as columns [column, column + width).
  void place_block(const std::byte* block, int64_t width, int64_t column);

  // True when w's kernels can read this input: prepared at this width for w's format.
  bool serves(const WeightMatrix& w) const;

  KernelLevel level() const { return level_; }
  const float* x() const { return x_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t cols() const { return cols_; }
  // The quantized forms; valid once their rows are quantized, when the products take them.
  const reference::Q8Activations& q8() const { return q8_; }
  const reference::Q8KActivations& q8_k() const { return q8_k_; }

  // The activation format each kind of weight's kernels read.
  enum class Format { kFloat, kQ8, kQ8K };
  static Format format_of(const WeightMatrix& w);

 private:
  KernelLevel level_ = KernelLevel::kReference;
  const float* x_ = nullptr;
  int64_t num_tokens_ = 0;
  int64_t cols_ = 0;
  bool takes_q8_ = false;
  bool takes_q8_k_ = false;
  bool takes_float_ = false;  // some product reads x itself (or the reference level's oracle)
  reference::Q8Activations q8_;
  reference::Q8KActivations q8_k_;
  // Storage behind q8_ and q8_k_.
  std::vector<int8_t> q8_qs_;
  std::vector<float> q8_d_;
  std::vector<float> q8_s_;
  std::vector<int8_t> q8_k_qs_;
  std::vector<float> q8_k_d_;
  std::vector<int16_t> q8_k_bsums_;
};

}  // namespace tachyon::kernels
