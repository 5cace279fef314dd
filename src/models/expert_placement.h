// ExpertPlacement: which tensor-parallel ranks compute each routed expert of each MoE layer
// (expert parallelism). By default each rank holds a consecutive range of expert ids. From a
// measured load (the selection counts `GET /admin/experts` or `tachyon bench --json` report,
// ExpertLoad), experts are placed so each rank's expected share of the pairs is as even as the
// ranks' slots allow, and with spare slots the hottest experts get copies on other ranks that
// take a share of their tokens (DeepSeek's EPLB idea). Where a pair is computed never changes its
// bits, so every placement gives the same logits.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "models/expert_load.h"

namespace tachyon {

class ExpertPlacement {
 public:
  ExpertPlacement() = default;

  // Each of `ranks` ranks holds a consecutive range of the `num_experts` ids, in every layer.
  static ExpertPlacement contiguous(int num_experts, int ranks);
  // Per measured layer: each rank gets ceil(num_experts / ranks) + `spare` slots; the `spare` x
  // ranks extra slots hold copies of the experts with the most selections per copy (at most
  // one copy per rank); then copies go, heaviest first, to the least loaded rank with a free
  // slot. Layers without counts (or with none recorded) stay contiguous.
  static Result<ExpertPlacement> balanced(const std::vector<ExpertLoad::Layer>& load,
                                          int num_experts, int ranks, int spare);

  // The ranks computing `expert` of model layer `layer`, ascending. A pair of an expert with
  // several owners goes to one of them: the expert's pairs of a step in that many consecutive
  // chunks, the i-th to the i-th owner.
  const std::vector<int>& owners(int layer, int expert) const;
  bool owns(int layer, int expert, int rank) const;
  int num_ranks() const { return ranks_; }
  // Whether any layer is placed by a measured load (else: consecutive ids everywhere).
  bool measured() const { return !layers_.empty(); }
  // Copies beyond one per expert, over all layers (or model layers [first_layer, end_layer)).
  int replicas() const;
  int replicas(int first_layer, int end_layer) const;
  // A layer's most loaded rank's expected share over the mean share (1: even), by `load`.
  double rank_imbalance(const ExpertLoad::Layer& layer) const;
  // "experts placed by measured load in 3 layers, 6 extra copies; ..." for logs.
  std::string describe(const std::vector<ExpertLoad::Layer>& load) const;

 private:
  using Owners = std::vector<std::vector<int>>;  // [experts] -> ranks
  const Owners& layer_owners(int layer) const;

  int ranks_ = 1;
  Owners default_;               // the contiguous placement
  std::vector<int> layer_index_;  // [model layers] -> index into layers_, or -1: default_
  std::vector<Owners> layers_;
};

// The selection counts in a JSON text: `GET /admin/experts`'s object ({"layers": [{"layer",
// "counts"}...]}) or `tachyon bench --json`'s array (its entry with "test": "experts").
Result<std::vector<ExpertLoad::Layer>> parse_expert_load(const std::string& json_text,
                                                         int num_experts);

}  // namespace tachyon
