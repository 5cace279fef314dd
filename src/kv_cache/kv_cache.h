// Keys and values of one sequence's past tokens, per layer, in a contiguous buffer.
// (The paged, shared cache for serving many sequences replaces this in the engine.)
#pragma once

#include <cstddef>
#include <vector>

namespace tachyon {

class KvCache {
 public:
  KvCache(int num_layers, int kv_size, int capacity);

  int capacity() const { return capacity_; }
  int kv_size() const { return kv_size_; }

  // f32 [capacity, kv_size]: row p holds the key (value) of position p.
  float* keys(int layer) { return storage_.data() + layer_offset(layer, 0); }
  float* values(int layer) { return storage_.data() + layer_offset(layer, 1); }
  const float* keys(int layer) const { return storage_.data() + layer_offset(layer, 0); }
  const float* values(int layer) const { return storage_.data() + layer_offset(layer, 1); }

  size_t bytes() const { return storage_.size() * sizeof(float); }

 private:
  size_t layer_offset(int layer, int which) const {
    return (static_cast<size_t>(layer) * 2 + which) * capacity_ * kv_size_;
  }

  int num_layers_;
  int kv_size_;
  int capacity_;
  std::vector<float> storage_;  // f32 [layers, 2 (key, value), capacity, kv_size]
};

}  // namespace tachyon
