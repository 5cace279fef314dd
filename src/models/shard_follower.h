// A follower rank's part of a model split over several processes: it runs the forward passes
// the leader sends (ShardCall) on its own shard and caches, until the leader stops.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv_cache/kv_cache.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/decoder_model.h"
#include "models/shard_call.h"

namespace tachyon {

class ShardFollower {
 public:
  // `model` was loaded with a shard that is not the leader's.
  ShardFollower(DecoderModel& model, ThreadPool& pool) : model_(model), pool_(pool) {}

  // Runs the leader's calls until it says stop. A call that fails here but not on the leader
  // (it checked the same arguments before sending) leaves the ranks out of step: an error.
  Status run();

 private:
  // This rank's cache for the leader's cache `id`, made (again) when its geometry changes.
  struct Cache {
    uint64_t id = 0;
    std::unique_ptr<KvCache> contiguous;
    std::unique_ptr<PagedKvCache> paged;
  };
  Result<Cache*> cache_for(const ShardCall& call);

  // Caches kept for the leader's most recent ones (a command uses one or two at a time).
  static constexpr size_t kMaxCaches = 4;

  DecoderModel& model_;
  ThreadPool& pool_;
  std::vector<Cache> caches_;  // most recently used last
  std::vector<float> logits_;
};

}  // namespace tachyon
