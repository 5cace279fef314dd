#include "kv_cache/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/prefetch.h"
#include "kernels/cpu/convert.h"

namespace tachyon {
namespace {

// dst[d * dst_stride + p] = src[p * src_stride + d] for d < width, p < count: rows of a
// store into a key block's columns (elements of 2 or 4 bytes, copied bit for bit).
template <typename T>
void scatter_columns(const uint8_t* src, int64_t src_stride, int count, int width, uint8_t* dst,
                     int64_t dst_stride) {
  const T* in = reinterpret_cast<const T*>(src);
  T* out = reinterpret_cast<T*>(dst);
  for (int d = 0; d < width; ++d) {
    for (int p = 0; p < count; ++p) out[d * dst_stride + p] = in[p * src_stride + d];
  }
}

}  // namespace

KvCache::KvCache(int num_layers, int num_kv_heads, int head_size, int capacity, DType type,
                 bool values_are_keys)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_size_(head_size),
      capacity_(capacity),
      padded_capacity_((capacity + kKeyBlock - 1) / kKeyBlock * kKeyBlock),
      type_(type),
      values_are_keys_(values_are_keys) {
  TACHYON_CHECK(type == DType::kF16 || type == DType::kF32);
  TACHYON_CHECK(num_layers >= 0 && num_kv_heads > 0 && head_size > 0 && capacity >= 0);
  storage_bytes_ = static_cast<size_t>(num_layers) * planes() * padded_capacity_ * kv_size() *
                   element_bytes();
  arena_ = std::make_unique<HugePageArena>();
  storage_ = arena_->allocate(storage_bytes_);
}

void KvCache::write_row(size_t byte_offset, const float* row, int64_t n) {
  if (type_ == DType::kF16) {
    kernels::f32_to_f16_row(row, reinterpret_cast<uint16_t*>(storage_ + byte_offset), n);
  } else {
    std::memcpy(storage_ + byte_offset, row, n * sizeof(float));
  }
}

void KvCache::read_row(size_t byte_offset, float* row, int64_t n) const {
  if (type_ == DType::kF16) {
    kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(storage_ + byte_offset), row,
                            n);
  } else {
    std::memcpy(row, storage_ + byte_offset, n * sizeof(float));
  }
}

void KvCache::store(int layer, int position, int count, const float* keys, const float* values) {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(position >= 0 && count >= 0 && position + count <= capacity_);
  const int kv = kv_size();
  const size_t bytes = element_bytes();
  // Keys: f16 ones converted as whole rows first (one rounding per element, as for values),
  // then each head's dimensions scattered into their blocks' columns.
  const uint8_t* key_rows = reinterpret_cast<const uint8_t*>(keys);
  if (type_ == DType::kF16) {
    // f16 bits [count, kv_size], the calling thread's own (threads may store at once).
    thread_local std::vector<uint8_t> staging;
    const size_t staged = static_cast<size_t>(count) * kv * bytes;
    if (staging.size() < staged) staging.resize(staged);
    kernels::f32_to_f16_row(keys, reinterpret_cast<uint16_t*>(staging.data()),
                            static_cast<int64_t>(count) * kv);
    key_rows = staging.data();
  }
  for (int h = 0; h < num_kv_heads_; ++h) {
    // Block by block: positions [p, p + n) share one.
    for (int p = 0, n = 0; p < count; p += n) {
      n = std::min(count - p, kKeyBlock - (position + p) % kKeyBlock);
      const uint8_t* rows =
          key_rows + (static_cast<size_t>(p) * kv + static_cast<size_t>(h) * head_size_) * bytes;
      uint8_t* columns = storage_ + head_offset(layer, 0, h) + key_index(position + p, 0) *
                                                                         bytes;
      if (type_ == DType::kF16) {
        scatter_columns<uint16_t>(rows, kv, n, head_size_, columns, kKeyBlock);
      } else {
        scatter_columns<uint32_t>(rows, kv, n, head_size_, columns, kKeyBlock);
      }
    }
    if (values_are_keys_) continue;
    for (int p = 0; p < count; ++p) {
      write_row(head_offset(layer, 1, h) + static_cast<size_t>(position + p) * head_size_ * bytes,
                values + static_cast<int64_t>(p) * kv + h * head_size_, head_size_);
    }
  }
}

void KvCache::prefetch_store(int layer, int position, int count) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(position >= 0 && count >= 0 && position + count <= capacity_);
  constexpr int kLineBytes = 64;
  const size_t bytes = element_bytes();
  const int line_positions = kLineBytes / static_cast<int>(bytes);  // divides kKeyBlock
  for (int h = 0; h < num_kv_heads_; ++h) {
    // A key line holds line_positions positions of one dimension.
    for (int p = position; p < position + count; p += line_positions - p % line_positions) {
      const uint8_t* keys = storage_ + head_offset(layer, 0, h) + key_index(p, 0) * bytes;
      for (int d = 0; d < head_size_; ++d) prefetch_for_write(keys + d * kKeyBlock * bytes);
    }
    if (values_are_keys_) continue;
    prefetch_range_for_write(
        storage_ + head_offset(layer, 1, h) + static_cast<size_t>(position) * head_size_ * bytes,
        static_cast<size_t>(count) * head_size_ * bytes);
  }
}

void KvCache::load_head(int layer, int kv_head, int head_size, int count, float* keys,
                        float* values) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ && head_size == head_size_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  TACHYON_CHECK(count >= 0 && count <= capacity_);
  // Widened block by block and column by column into `values` (as scratch), then put in rows.
  for (int first = 0; first < count; first += kKeyBlock) {
    const int n = std::min(kKeyBlock, count - first);
    for (int d = 0; d < head_size; ++d) {
      read_row(head_offset(layer, 0, kv_head) + key_index(first, d) * element_bytes(), values, n);
      for (int p = 0; p < n; ++p) keys[static_cast<int64_t>(first + p) * head_size + d] = values[p];
    }
  }
  if (values_are_keys_) {
    std::memcpy(values, keys, static_cast<size_t>(count) * head_size * sizeof(float));
    return;
  }
  read_row(head_offset(layer, 1, kv_head), values, static_cast<int64_t>(count) * head_size);
}

void KvCache::load_span(int layer, int kv_head, int head_size, int first, int count,
                        float* keys_by_dimension, int64_t key_stride, float* values) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ && head_size == head_size_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  TACHYON_CHECK(first >= 0 && count >= 0 && first + count <= capacity_);
  const size_t bytes = element_bytes();
  // Block by block: positions [first + p, first + p + n) share one.
  for (int p = 0, n = 0; p < count; p += n) {
    n = std::min(count - p, kKeyBlock - (first + p) % kKeyBlock);
    for (int d = 0; d < head_size; ++d) {
      read_row(head_offset(layer, 0, kv_head) + key_index(first + p, d) * bytes,
               keys_by_dimension + d * key_stride + p, n);
    }
  }
  if (values_are_keys_) {
    for (int p = 0; p < count; ++p) {
      for (int d = 0; d < head_size; ++d) {
        values[static_cast<int64_t>(p) * head_size + d] = keys_by_dimension[d * key_stride + p];
      }
    }
    return;
  }
  read_row(head_offset(layer, 1, kv_head) + static_cast<size_t>(first) * head_size * bytes, values,
           static_cast<int64_t>(count) * head_size);
}

const uint16_t* KvCache::f16_keys(int layer, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kF16 && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  return reinterpret_cast<const uint16_t*>(storage_ + head_offset(layer, 0, kv_head));
}

const uint16_t* KvCache::f16_values(int layer, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kF16 && !values_are_keys_ && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  return reinterpret_cast<const uint16_t*>(storage_ + head_offset(layer, 1, kv_head));
}

}  // namespace tachyon
