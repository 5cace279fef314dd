// ExpertLoad: how often each routed expert was chosen, per MoE layer, since the model loaded (or
// the last reset): what shows a user the hot experts and how unevenly a layer's tokens spread
// (imbalance = the most chosen expert's count over the mean), to size --experts-mem by. The
// forward pass records; any thread reads (relaxed atomics: a snapshot may mix steps).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace tachyon {

class ExpertLoad {
 public:
  struct Layer {
    int layer = 0;                 // the model's layer index (MTP layers after the trunk's)
    std::vector<uint64_t> counts;  // [experts]: tokens that chose each expert
    uint64_t total() const;
    // max / mean of counts (1: perfectly even); 0 before any token.
    double imbalance() const;
  };

  ExpertLoad() = default;
  // `moe_layers`: the model's layers with routed experts, each with `num_experts`.
  ExpertLoad(std::vector<int> moe_layers, int num_experts);

  bool empty() const { return moe_layers_.empty(); }
  // Adds `count` choices of `expert` in model layer `layer` (a layer with experts).
  void add(int layer, int expert, uint64_t count);
  std::vector<Layer> snapshot() const;
  void reset();

 private:
  std::vector<int> moe_layers_;
  std::vector<int> index_of_layer_;  // [model layers]: index into moe_layers_, or -1
  int num_experts_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [moe layers, experts]
};

}  // namespace tachyon
