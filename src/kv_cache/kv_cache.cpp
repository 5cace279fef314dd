#include "kv_cache/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/convert.h"

namespace tachyon {

KvCache::KvCache(int num_layers, int kv_size, int capacity, DType type)
    : kv_size_(kv_size), capacity_(capacity), type_(type) {
  TACHYON_CHECK(type == DType::kF16 || type == DType::kF32);
  storage_.resize(static_cast<size_t>(num_layers) * 2 * capacity * kv_size * element_bytes());
}

void KvCache::write_row(size_t byte_offset, const float* row, int64_t n) {
  if (type_ == DType::kF16) {
    kernels::f32_to_f16_row(row, reinterpret_cast<uint16_t*>(storage_.data() + byte_offset), n);
  } else {
    std::memcpy(storage_.data() + byte_offset, row, n * sizeof(float));
  }
}

void KvCache::read_row(size_t byte_offset, float* row, int64_t n) const {
  if (type_ == DType::kF16) {
    kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(storage_.data() + byte_offset), row,
                            n);
  } else {
    std::memcpy(row, storage_.data() + byte_offset, n * sizeof(float));
  }
}

void KvCache::store(int layer, int position, int count, const float* keys, const float* values) {
  // Rows of one layer are contiguous, so the whole batch is one run.
  const int64_t n = static_cast<int64_t>(count) * kv_size_;
  write_row(offset(layer, 0, position, 0), keys, n);
  write_row(offset(layer, 1, position, 0), values, n);
}

void KvCache::load_head(int layer, int kv_head, int head_size, int count, float* keys,
                        float* values) const {
  for (int p = 0; p < count; ++p) {
    read_row(offset(layer, 0, p, kv_head * head_size), keys + static_cast<int64_t>(p) * head_size,
             head_size);
    read_row(offset(layer, 1, p, kv_head * head_size), values + static_cast<int64_t>(p) * head_size,
             head_size);
  }
}

void KvCache::load_span(int layer, int kv_head, int head_size, int first, int count,
                        float* keys_by_dimension, int64_t key_stride, float* values) const {
  TACHYON_CHECK(first >= 0 && count >= 0 && first + count <= capacity_);
  constexpr int kChunk = 256;  // dimensions widened at a time, then scattered into columns
  float key[kChunk];
  for (int p = 0; p < count; ++p) {
    for (int d0 = 0; d0 < head_size; d0 += kChunk) {
      const int n = std::min(kChunk, head_size - d0);
      read_row(offset(layer, 0, first + p, kv_head * head_size + d0), key, n);
      for (int d = 0; d < n; ++d) keys_by_dimension[(d0 + d) * key_stride + p] = key[d];
    }
    read_row(offset(layer, 1, first + p, kv_head * head_size),
             values + static_cast<int64_t>(p) * head_size, head_size);
  }
}

}  // namespace tachyon
