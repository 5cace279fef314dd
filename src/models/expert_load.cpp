#include "models/expert_load.h"

#include <algorithm>

namespace tachyon {

uint64_t ExpertLoad::Layer::total() const {
  uint64_t sum = 0;
  for (const uint64_t count : counts) sum += count;
  return sum;
}

double ExpertLoad::Layer::imbalance() const {
  const uint64_t sum = total();
  if (sum == 0 || counts.empty()) return 0;
  const uint64_t most = *std::max_element(counts.begin(), counts.end());
  return static_cast<double>(most) * static_cast<double>(counts.size()) / static_cast<double>(sum);
}

ExpertLoad::ExpertLoad(std::vector<int> moe_layers, int num_experts)
    : moe_layers_(std::move(moe_layers)), num_experts_(num_experts) {
  const int last = moe_layers_.empty() ? -1 : *std::max_element(moe_layers_.begin(), moe_layers_.end());
  index_of_layer_.assign(last + 1, -1);
  for (size_t i = 0; i < moe_layers_.size(); ++i) index_of_layer_[moe_layers_[i]] = static_cast<int>(i);
  const size_t size = moe_layers_.size() * static_cast<size_t>(num_experts_);
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(size);
  for (size_t i = 0; i < size; ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void ExpertLoad::add(int layer, int expert, uint64_t count) {
  const int index = index_of_layer_.at(layer);
  if (index < 0) return;
  counts_[static_cast<size_t>(index) * num_experts_ + expert].fetch_add(count,
                                                                       std::memory_order_relaxed);
}

std::vector<ExpertLoad::Layer> ExpertLoad::snapshot() const {
  std::vector<Layer> layers(moe_layers_.size());
  for (size_t i = 0; i < moe_layers_.size(); ++i) {
    layers[i].layer = moe_layers_[i];
    layers[i].counts.resize(num_experts_);
    for (int e = 0; e < num_experts_; ++e) {
      layers[i].counts[e] = counts_[i * num_experts_ + e].load(std::memory_order_relaxed);
    }
  }
  return layers;
}

void ExpertLoad::reset() {
  const size_t size = moe_layers_.size() * static_cast<size_t>(num_experts_);
  for (size_t i = 0; i < size; ++i) counts_[i].store(0, std::memory_order_relaxed);
}

}  // namespace tachyon
