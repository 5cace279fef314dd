// What the leader of a model split over several processes asks every follower to run: one of
// DecoderModel's forward passes with its arguments and the geometry of the cache it runs on,
// a new expert placement, or stop. The leader decides every step (batching, paging, prefix reuse), so each follower's
// cache holds the same positions in the same blocks as the leader's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "dist/communicator.h"
#include "models/forward_batch.h"

namespace tachyon {

// Tags of the point-to-point messages of a forward pass.
inline constexpr int kResidualTag = 1;  // the residual stream, stage to stage
inline constexpr int kLogitsTag = 2;    // the last stage's logits, to the leader
inline constexpr int kExpertLoadTag = 3;  // a stage's expert load, to the leader

struct ShardCall {
  // kRebalanceExperts: place the routed experts anew by the measured load
  // (DecoderModel::rebalance_experts); kExpertLoad: send the stage's expert load to the leader
  // (DecoderModel::expert_load_report).
  enum class Kind : uint32_t {
    kStop = 0,
    kForward = 1,
    kForwardBatch = 2,
    kRebalanceExperts = 3,
    kExpertLoad = 4,
  };
  Kind kind = Kind::kStop;
  uint64_t cache_id = 0;  // names the leader's cache; a follower keeps one of its own per name
  DType cache_type = DType::kF16;
  int capacity = 0;           // kForward: the cache's positions; kForwardBatch: its blocks
  int num_local_blocks = 0;   // kForwardBatch: sliding-window layers' blocks
  // kForward's arguments.
  int start_position = 0;
  int num_logits = 0;
  int position_offset = 0;
  int expert_spare = 0;  // kRebalanceExperts: spare expert slots per rank and layer
  std::vector<int32_t> tokens;
  ForwardBatch batch;  // kForwardBatch's

  std::vector<uint8_t> encode() const;
  // A call as encode() wrote it (the bytes come from the leader of the same build; a size that
  // does not add up is a broken job and CHECKed).
  static ShardCall decode(const std::vector<uint8_t>& bytes);
};

// Sends `call` from the leader (world rank 0) to every other rank.
void send_shard_call(dist::Communicator& world, const ShardCall& call);
// A follower's wait for the leader's next call: idle (sleeping between polls), not spinning.
ShardCall receive_shard_call(dist::Communicator& world);

}  // namespace tachyon
