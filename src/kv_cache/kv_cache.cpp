#include "kv_cache/kv_cache.h"

namespace tachyon {

KvCache::KvCache(int num_layers, int kv_size, int capacity)
    : num_layers_(num_layers), kv_size_(kv_size), capacity_(capacity),
      storage_(static_cast<size_t>(num_layers) * 2 * capacity * kv_size, 0.0f) {}

}  // namespace tachyon
