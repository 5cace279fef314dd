// DecoderModel's routed experts across expert-parallel ranks: the placement in use, the load
// measured over every stage (ExpertLoadReport) and placing the experts anew while serving
// (rebalance_experts). The expert exchange itself runs with the layers (decoder_model.cpp).
#include "models/decoder_model.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/check.h"
#include "models/shard_call.h"

namespace tachyon {

std::shared_ptr<const ExpertPlacement> DecoderModel::expert_placement() const {
  std::lock_guard<std::mutex> lock(placement_mutex_);
  return shard_.expert_placement;
}

ExpertLoadReport DecoderModel::expert_load_report() const {
  ExpertLoadReport report;
  report.layers = expert_load_.snapshot();
  report.rank_imbalance.assign(report.layers.size(), 0.0);
  const std::shared_ptr<const ExpertPlacement> placement = expert_placement();
  if (placement != nullptr) {
    report.expert_parallel = true;
    report.ranks = placement->num_ranks();
    report.placed_by_load = placement->measured();
    report.replicas = placement->replicas(shard_.first_layer, shard_.end_layer);
    for (size_t i = 0; i < report.layers.size(); ++i) {
      const ExpertLoad::Layer& layer = report.layers[i];
      const bool ours = layer.layer >= shard_.first_layer && layer.layer < shard_.end_layer;
      if (ours && layer.total() > 0) report.rank_imbalance[i] = placement->rank_imbalance(layer);
    }
  }
  if (shard_.pp_size == 1) return report;
  if (shard_.leader()) {
    ShardCall call;
    call.kind = ShardCall::Kind::kExpertLoad;
    send_shard_call(*shard_.world, call);
  }
  // Each stage's first TP rank sends its layers' part; layers of other stages are zero there.
  const size_t num_layers = report.layers.size();
  const size_t num_experts = static_cast<size_t>(config_.moe.num_experts);
  std::vector<uint64_t> counts(num_layers * num_experts + 2);
  std::vector<double> imbalance(num_layers);
  if (!shard_.leader()) {
    if (shard_.tp_rank != 0) return report;
    for (size_t i = 0; i < num_layers; ++i) {
      std::copy(report.layers[i].counts.begin(), report.layers[i].counts.end(),
                counts.begin() + static_cast<int64_t>(i * num_experts));
    }
    counts[num_layers * num_experts] = static_cast<uint64_t>(report.replicas);
    counts[num_layers * num_experts + 1] = report.placed_by_load ? 1 : 0;
    shard_.world->send(counts.data(), counts.size() * sizeof(uint64_t), 0, kExpertLoadTag);
    shard_.world->send(report.rank_imbalance.data(), num_layers * sizeof(double), 0,
                       kExpertLoadTag);
    return report;
  }
  for (int stage = 1; stage < shard_.pp_size; ++stage) {
    const int from = shard_.world_rank(stage, 0);
    shard_.world->receive(counts.data(), counts.size() * sizeof(uint64_t), from, kExpertLoadTag);
    shard_.world->receive(imbalance.data(), num_layers * sizeof(double), from, kExpertLoadTag);
    for (size_t i = 0; i < num_layers; ++i) {
      for (size_t e = 0; e < num_experts; ++e) {
        report.layers[i].counts[e] += counts[i * num_experts + e];
      }
      report.rank_imbalance[i] += imbalance[i];
    }
    report.replicas += static_cast<int>(counts[num_layers * num_experts]);
    report.placed_by_load = report.placed_by_load || counts[num_layers * num_experts + 1] != 0;
  }
  return report;
}

int DecoderModel::expert_spare() const {
  std::lock_guard<std::mutex> lock(placement_mutex_);
  return shard_.expert_spare;
}

Result<ExpertRebalance> DecoderModel::rebalance_experts(int spare) {
  const int num_experts = config_.moe.num_experts;
  if (!config_.moe.enabled()) return invalid_argument("the model has no routed experts");
  if (shard_.tp_size < 2 || shard_.expert_placement == nullptr) {
    return invalid_argument("experts are placed over the ranks of --tp (mpirun); this model "
                            "runs with every expert in one process");
  }
  if (file_ == nullptr) {
    return unsupported("rebalancing loads the experts again from the model's GGUF file; this "
                       "model came from a Hugging Face folder");
  }
  if (weights_.expert_cache) {
    return unsupported("with --experts-mem the experts are read from the file when chosen; "
                       "rebalancing places resident experts");
  }
  if (spare < 0 || spare > num_experts) {
    return invalid_argument(fmt::format("spare expert slots per rank must be 0-{}", num_experts));
  }
  if (shard_.leader()) {
    ShardCall call;
    call.kind = ShardCall::Kind::kRebalanceExperts;
    call.expert_spare = spare;
    send_shard_call(*shard_.world, call);
  }
  const auto start = std::chrono::steady_clock::now();
  // This stage's counts as its first TP rank recorded them: every TP rank routes the same
  // tokens, and one copy makes sure that all of them place the experts alike.
  std::vector<ExpertLoad::Layer> load = expert_load_.snapshot();
  std::vector<uint64_t> counts;
  for (const ExpertLoad::Layer& layer : load) {
    counts.insert(counts.end(), layer.counts.begin(), layer.counts.end());
  }
  shard_.tensor_group->broadcast(counts.data(), counts.size() * sizeof(uint64_t), 0);
  for (size_t i = 0; i < load.size(); ++i) {
    std::copy_n(counts.begin() + static_cast<int64_t>(i) * num_experts, num_experts,
                load[i].counts.begin());
  }
  // Other stages' layers have no counts here and stay as they are (they are not this rank's).
  Result<ExpertPlacement> placement =
      ExpertPlacement::balanced(load, num_experts, shard_.tp_size, spare);
  // From here on every rank must follow: a failure leaves the ranks out of step.
  TACHYON_CHECK(placement.ok());
  auto placed = std::make_shared<const ExpertPlacement>(std::move(*placement));
  double before = 0, after = 0;
  int layers = 0;
  for (const ExpertLoad::Layer& layer : load) {
    if (layer.total() == 0) continue;
    before += shard_.expert_placement->rank_imbalance(layer);
    after += placed->rank_imbalance(layer);
    ++layers;
  }
  ModelShard shard = shard_;
  shard.expert_placement = placed;
  TACHYON_RETURN_IF_ERROR(weights_.reload_experts(*file_, config_, shard));
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    shard_.expert_placement = std::move(placed);
    shard_.expert_spare = spare;
  }
  // Each rank's part of the report; the leader adds them up.
  const bool first_tp_rank = shard_.tp_rank == 0;
  float mine[] = {first_tp_rank ? static_cast<float>(layers) : 0.0f,
                  first_tp_rank ? static_cast<float>(shard_.expert_placement->replicas(
                                      shard_.first_layer, shard_.end_layer))
                                : 0.0f,
                  first_tp_rank ? static_cast<float>(before) : 0.0f,
                  first_tp_rank ? static_cast<float>(after) : 0.0f,
                  static_cast<float>(std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - start)
                                         .count()),
                  static_cast<float>(static_cast<double>(weights_.resident_bytes()) / (1 << 20))};
  constexpr int kFields = static_cast<int>(std::size(mine));
  const int ranks = shard_.world->size();
  std::vector<int> part_counts(ranks, kFields), offsets(ranks);
  for (int r = 0; r < ranks; ++r) offsets[r] = r * kFields;
  std::vector<float> all(static_cast<size_t>(ranks) * kFields);
  shard_.world->gather(mine, part_counts, offsets, all.data(), 0);
  ExpertRebalance report;
  if (!shard_.leader()) return report;
  double sum_before = 0, sum_after = 0;
  for (int r = 0; r < ranks; ++r) {
    const float* part = all.data() + r * kFields;
    report.layers += static_cast<int>(part[0]);
    report.replicas += static_cast<int>(part[1]);
    sum_before += part[2];
    sum_after += part[3];
    report.seconds = std::max(report.seconds, static_cast<double>(part[4]));
    report.max_rank_weights_mib = std::max(report.max_rank_weights_mib, static_cast<double>(part[5]));
  }
  if (report.layers > 0) {
    report.imbalance_before = sum_before / report.layers;
    report.imbalance_after = sum_after / report.layers;
  }
  return report;
}

}  // namespace tachyon
