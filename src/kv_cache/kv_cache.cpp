#include "kv_cache/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/prefetch.h"
#include "core/half.h"
#include "kernels/cpu/convert.h"
#include "kv_cache/head_rows.h"
#include "kv_cache/kv_cache_type.h"

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
  TACHYON_CHECK(check_kv_cache_type(type, head_size).ok());
  TACHYON_CHECK(num_layers >= 0 && num_kv_heads > 0 && head_size > 0 && capacity >= 0);
  head_bytes_ = static_cast<size_t>(
      kv_cache_bytes(type, static_cast<int64_t>(head_size) * padded_capacity_));
  storage_bytes_ = static_cast<size_t>(num_layers) * planes() * num_kv_heads * head_bytes_;
  arena_ = std::make_unique<HugePageArena>();
  storage_ = arena_->allocate(storage_bytes_);
}

Q8Plane KvCache::q8_plane(int layer, int which, int kv_head) const {
  const uint8_t* plane = storage_ + head_offset(layer, which, kv_head);
  return {reinterpret_cast<const int8_t*>(plane),
          reinterpret_cast<const uint16_t*>(plane +
                                            static_cast<size_t>(head_size_) * padded_capacity_)};
}

void KvCache::store(int layer, int position, int count, const float* keys, const float* values) {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(position >= 0 && count >= 0 && position + count <= capacity_);
  const int kv = kv_size();
  const size_t bytes = element_bytes();
  const bool q8 = type_ == DType::kQ8_0;
  const int scale_groups = head_size_ / kernels::kQ8Group;  // per head and position, q8 only
  // Keys: f16 and q8 ones converted as whole rows first (rounded as values are), then each
  // head's dimensions (and q8 scales) scattered into their blocks' columns. Staging: the
  // calling thread's own (threads may store at once): f16 bits or int8 [count, kv_size], q8
  // scales f16 bits [count, kv_size / 32].
  thread_local std::vector<uint8_t> staging;
  thread_local std::vector<uint16_t> staged_scales;
  const uint8_t* key_rows = reinterpret_cast<const uint8_t*>(keys);
  const int64_t key_values = static_cast<int64_t>(count) * kv;
  if (type_ == DType::kF16) {
    if (staging.size() < key_values * bytes) staging.resize(key_values * bytes);
    kernels::f32_to_f16_row(keys, reinterpret_cast<uint16_t*>(staging.data()), key_values);
    key_rows = staging.data();
  } else if (q8) {
    if (staging.size() < static_cast<size_t>(key_values)) staging.resize(key_values);
    if (staged_scales.size() < static_cast<size_t>(key_values / kernels::kQ8Group)) {
      staged_scales.resize(key_values / kernels::kQ8Group);
    }
    kernels::f32_to_q8_row(keys, reinterpret_cast<int8_t*>(staging.data()), staged_scales.data(),
                           key_values);
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
      if (q8) {
        int8_t* keys_out = reinterpret_cast<int8_t*>(storage_ + head_offset(layer, 0, h));
        for (int i = 0; i < n; ++i) {
          const int8_t* row = reinterpret_cast<const int8_t*>(rows) + static_cast<size_t>(i) * kv;
          for (int d = 0; d < head_size_; ++d) keys_out[q8_key_index(position + p + i, d)] = row[d];
        }
        const uint16_t* scale_rows = staged_scales.data() +
                                     (static_cast<size_t>(p) * kv + h * head_size_) /
                                         kernels::kQ8Group;
        uint16_t* scale_columns = q8_scales(layer, 0, h) +
                                  key_scale_index(position + p, 0);
        scatter_columns<uint16_t>(reinterpret_cast<const uint8_t*>(scale_rows),
                                  kv / kernels::kQ8Group, n, scale_groups,
                                  reinterpret_cast<uint8_t*>(scale_columns), kKeyBlock);
      } else if (type_ == DType::kF16) {
        scatter_columns<uint16_t>(rows, kv, n, head_size_, columns, kKeyBlock);
      } else {
        scatter_columns<uint32_t>(rows, kv, n, head_size_, columns, kKeyBlock);
      }
    }
    if (values_are_keys_) continue;
    uint8_t* value_plane = storage_ + head_offset(layer, 1, h);
    for (int p = 0; p < count; ++p) {
      const float* row = values + static_cast<int64_t>(p) * kv + h * head_size_;
      const size_t at = static_cast<size_t>(position + p) * head_size_;
      if (q8) {
        kernels::f32_to_q8_row(row, reinterpret_cast<int8_t*>(value_plane) + at,
                               q8_scales(layer, 1, h) +
                                   at / kernels::kQ8Group,
                               head_size_);
      } else if (type_ == DType::kF16) {
        kernels::f32_to_f16_row(row, reinterpret_cast<uint16_t*>(value_plane) + at, head_size_);
      } else {
        std::memcpy(reinterpret_cast<float*>(value_plane) + at, row, head_size_ * sizeof(float));
      }
    }
  }
}

void KvCache::prefetch_store(int layer, int position, int count) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(position >= 0 && count >= 0 && position + count <= capacity_);
  constexpr int kLineBytes = 64;
  const size_t bytes = element_bytes();
  const int line_positions = kLineBytes / static_cast<int>(bytes);  // divides kKeyBlock
  const int scale_groups = head_size_ / kernels::kQ8Group;
  for (int h = 0; h < num_kv_heads_; ++h) {
    if (type_ != DType::kQ8_0) {
      // A key line holds line_positions positions of one dimension.
      for (int p = position; p < position + count; p += line_positions - p % line_positions) {
        const uint8_t* keys = storage_ + head_offset(layer, 0, h) + key_index(p, 0) * bytes;
        for (int d = 0; d < head_size_; ++d) prefetch_for_write(keys + d * kKeyBlock * bytes);
      }
    } else {
      // A q8 key line holds 16 positions of 4 dimensions, a scale line 32 positions of a group
      // of 32 dimensions.
      const uint8_t* keys = storage_ + head_offset(layer, 0, h);
      for (int p = position; p < position + count; p += 16 - p % 16) {
        for (int d = 0; d < head_size_; d += 4) prefetch_for_write(keys + q8_key_index(p, d));
      }
      const uint16_t* scales = q8_plane(layer, 0, h).scales;
      for (int p = position; p < position + count; p += 32 - p % 32) {
        for (int g = 0; g < scale_groups; ++g) {
          prefetch_for_write(scales + key_scale_index(p, g * kernels::kQ8Group));
        }
      }
    }
    if (values_are_keys_) continue;
    prefetch_range_for_write(
        storage_ + head_offset(layer, 1, h) + static_cast<size_t>(position) * head_size_ * bytes,
        static_cast<size_t>(count) * head_size_ * bytes);
    if (type_ == DType::kQ8_0) {
      prefetch_range_for_write(q8_plane(layer, 1, h).scales + position * scale_groups,
                               static_cast<size_t>(count) * scale_groups * 2);
    }
  }
}

void KvCache::prefetch_span(int layer, int kv_head, int first, int count) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ && kv_head >= 0 && kv_head < num_kv_heads_);
  TACHYON_CHECK(first >= 0 && count > 0 && first + count <= capacity_ &&
                first / kKeyBlock == (first + count - 1) / kKeyBlock);
  // The whole key block (its rows hold every position of the block), the values' rows.
  const int block_first = first / kKeyBlock * kKeyBlock;
  const size_t bytes = element_bytes();
  const uint8_t* keys = storage_ + head_offset(layer, 0, kv_head);
  prefetch_range_for_read(keys + static_cast<size_t>(block_first) * head_size_ * bytes,
                          static_cast<size_t>(kKeyBlock) * head_size_ * bytes);
  const int scale_groups = head_size_ / kernels::kQ8Group;
  if (type_ == DType::kQ8_0) {
    prefetch_range_for_read(q8_plane(layer, 0, kv_head).scales + block_first * scale_groups,
                            static_cast<size_t>(kKeyBlock) * scale_groups * 2);
  }
  if (values_are_keys_) return;
  prefetch_range_for_read(storage_ + head_offset(layer, 1, kv_head) +
                              static_cast<size_t>(first) * head_size_ * bytes,
                          static_cast<size_t>(count) * head_size_ * bytes);
  if (type_ == DType::kQ8_0) {
    prefetch_range_for_read(q8_plane(layer, 1, kv_head).scales + first * scale_groups,
                            static_cast<size_t>(count) * scale_groups * 2);
  }
}

void KvCache::read_key_run(int layer, int kv_head, int position, int d, int n, float* out) const {
  if (type_ == DType::kQ8_0) {
    const Q8Plane keys = q8_plane(layer, 0, kv_head);
    const uint16_t* scales = keys.scales + key_scale_index(position, d);
    for (int p = 0; p < n; ++p) {
      out[p] = static_cast<float>(keys.data[q8_key_index(position + p, d)]) * f16_to_f32(scales[p]);
    }
    return;
  }
  const uint8_t* run = storage_ + head_offset(layer, 0, kv_head) + key_index(position, d) *
                                                                        element_bytes();
  if (type_ == DType::kF16) {
    kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(run), out, n);
  } else {
    std::memcpy(out, run, n * sizeof(float));
  }
}

void KvCache::read_value_rows(int layer, int kv_head, int position, int count, float* out) const {
  const size_t at = static_cast<size_t>(position) * head_size_;
  const int64_t n = static_cast<int64_t>(count) * head_size_;
  if (type_ == DType::kQ8_0) {
    const Q8Plane values = q8_plane(layer, 1, kv_head);
    kernels::q8_to_f32_row(values.data + at, values.scales + at / kernels::kQ8Group, out, n);
    return;
  }
  const uint8_t* rows = storage_ + head_offset(layer, 1, kv_head) + at * element_bytes();
  if (type_ == DType::kF16) {
    kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(rows), out, n);
  } else {
    std::memcpy(out, rows, n * sizeof(float));
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
      read_key_run(layer, kv_head, first, d, n, values);
      for (int p = 0; p < n; ++p) keys[static_cast<int64_t>(first + p) * head_size + d] = values[p];
    }
  }
  if (values_are_keys_) {
    std::memcpy(values, keys, static_cast<size_t>(count) * head_size * sizeof(float));
    return;
  }
  read_value_rows(layer, kv_head, 0, count, values);
}

void KvCache::load_span(int layer, int kv_head, int head_size, int first, int count,
                        float* keys_by_dimension, int64_t key_stride, float* values) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ && head_size == head_size_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  TACHYON_CHECK(first >= 0 && count >= 0 && first + count <= capacity_);
  // Block by block: positions [first + p, first + p + n) share one.
  for (int p = 0, n = 0; p < count; p += n) {
    n = std::min(count - p, kKeyBlock - (first + p) % kKeyBlock);
    for (int d = 0; d < head_size; ++d) {
      read_key_run(layer, kv_head, first + p, d, n, keys_by_dimension + d * key_stride + p);
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
  read_value_rows(layer, kv_head, first, count, values);
}

void KvCache::drop_positions(int first, int count, int length,
                             FunctionRef<void(float* keys, int n, int layer)> adjust_keys) {
  TACHYON_CHECK(first >= 0 && count >= 0 && first + count <= length && length <= capacity_);
  if (count == 0) return;
  const int kv = kv_size();
  const int run = kKeyBlock;
  std::vector<float> by_dimension(static_cast<size_t>(head_size_) * run);
  std::vector<float> head_values(static_cast<size_t>(run) * head_size_);
  std::vector<float> keys(static_cast<size_t>(run) * kv), values(static_cast<size_t>(run) * kv);
  for (int layer = 0; layer < num_layers_; ++layer) {
    // Front to back: a run is read whole before it is written below its old place, and later
    // runs start past where this one is written.
    for (int source = first + count; source < length; source += run) {
      const int n = std::min(run, length - source);
      for (int head = 0; head < num_kv_heads_; ++head) {
        load_span(layer, head, head_size_, source, n, by_dimension.data(), run,
                  head_values.data());
        for (int p = 0; p < n; ++p) {
          copy_head_position(by_dimension.data(), run, head_values.data(), p, head, head_size_,
                             kv, keys.data(), values.data(), p);
        }
      }
      adjust_keys(keys.data(), n, layer);
      store(layer, source - count, n, keys.data(), values.data());
    }
  }
}

void KvCache::keep_positions(int layer, std::span<const std::vector<int>> kept) {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ &&
                static_cast<int>(kept.size()) == num_kv_heads_);
  const int count = static_cast<int>(kept[0].size());
  const int kv = kv_size();
  std::vector<float> keys(static_cast<size_t>(count) * kv), values(keys.size());
  std::vector<float> head_keys, head_values;
  for (int head = 0; head < num_kv_heads_; ++head) {
    TACHYON_CHECK(static_cast<int>(kept[head].size()) == count);
    const int length = count > 0 ? kept[head].back() + 1 : 0;
    head_keys.resize(static_cast<size_t>(length) * head_size_);
    head_values.resize(head_keys.size());
    load_head(layer, head, head_size_, length, head_keys.data(), head_values.data());
    for (int i = 0; i < count; ++i) {
      const int from = kept[head][i];
      TACHYON_CHECK(from >= (i > 0 ? kept[head][i - 1] + 1 : 0));
      std::memcpy(keys.data() + static_cast<size_t>(i) * kv + head * head_size_,
                  head_keys.data() + static_cast<size_t>(from) * head_size_,
                  head_size_ * sizeof(float));
      std::memcpy(values.data() + static_cast<size_t>(i) * kv + head * head_size_,
                  head_values.data() + static_cast<size_t>(from) * head_size_,
                  head_size_ * sizeof(float));
    }
  }
  if (count > 0) store(layer, 0, count, keys.data(), values.data());
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

Q8Plane KvCache::q8_keys(int layer, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kQ8_0 && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  return q8_plane(layer, 0, kv_head);
}

Q8Plane KvCache::q8_values(int layer, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kQ8_0 && !values_are_keys_ && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(kv_head >= 0 && kv_head < num_kv_heads_);
  return q8_plane(layer, 1, kv_head);
}

}  // namespace tachyon
