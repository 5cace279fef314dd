#include "models/shard_follower.h"

#include <fmt/format.h>

#include "models/shard_call.h"

namespace tachyon {

Result<ShardFollower::Cache*> ShardFollower::cache_for(const ShardCall& call) {
  const bool paged = call.kind == ShardCall::Kind::kForwardBatch;
  for (size_t i = 0; i < caches_.size(); ++i) {
    if (caches_[i].id != call.cache_id) continue;
    Cache cache = std::move(caches_[i]);
    caches_.erase(caches_.begin() + static_cast<std::ptrdiff_t>(i));
    const bool same =
        paged ? cache.paged != nullptr && cache.paged->num_blocks() == call.capacity &&
                    cache.paged->block_size() == call.batch.block_size &&
                    cache.paged->type() == call.cache_type &&
                    cache.paged->num_local_blocks() == call.num_local_blocks
              : cache.contiguous != nullptr && cache.contiguous->capacity() == call.capacity &&
                    cache.contiguous->type() == call.cache_type;
    if (same) {
      caches_.push_back(std::move(cache));
      return &caches_.back();
    }
    break;  // made again below
  }
  Cache cache;
  cache.id = call.cache_id;
  if (paged) {
    TACHYON_ASSIGN_OR_RETURN(cache.paged,
                             model_.make_paged_cache(call.capacity, call.batch.block_size,
                                                     call.cache_type, call.num_local_blocks));
  } else {
    cache.contiguous = std::make_unique<KvCache>(model_.make_cache(call.capacity, call.cache_type));
  }
  if (caches_.size() == kMaxCaches) caches_.erase(caches_.begin());
  caches_.push_back(std::move(cache));
  return &caches_.back();
}

Status ShardFollower::run() {
  dist::Communicator& world = *model_.shard().world;
  for (;;) {
    const ShardCall call = receive_shard_call(world);
    if (call.kind == ShardCall::Kind::kStop) return Status();
    if (call.kind == ShardCall::Kind::kRebalanceExperts) {
      Result<ExpertRebalance> done = model_.rebalance_experts(call.expert_spare);
      if (!done.ok()) {
        return Status(done.status().code(),
                      fmt::format("rank {}: the leader's expert rebalancing failed here: {}",
                                  world.rank(), done.status().message()));
      }
      continue;
    }
    if (call.kind == ShardCall::Kind::kExpertLoad) {
      model_.expert_load_report();
      continue;
    }
    TACHYON_ASSIGN_OR_RETURN(Cache * cache, cache_for(call));
    Status status;
    if (call.kind == ShardCall::Kind::kForward) {
      status = model_.forward(call.tokens, call.start_position, *cache->contiguous, pool_,
                              call.num_logits, logits_, call.position_offset);
    } else {
      status = model_.forward_batch(call.batch, *cache->paged, pool_, logits_);
    }
    if (!status.ok()) {
      return Status(status.code(), fmt::format("rank {}: the leader's forward pass failed here: {}",
                                               world.rank(), status.message()));
    }
  }
}

}  // namespace tachyon
