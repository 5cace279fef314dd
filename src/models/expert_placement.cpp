#include "models/expert_placement.h"

#include <algorithm>
#include <numeric>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace tachyon {
namespace {

constexpr int64_t kMaxLayers = 1 << 16;  // a layer index past this is no model's

}  // namespace

ExpertPlacement ExpertPlacement::contiguous(int num_experts, int ranks) {
  ExpertPlacement placement;
  placement.ranks_ = std::max(ranks, 1);
  placement.default_.resize(static_cast<size_t>(std::max(num_experts, 0)));
  // The same ranges as RowSplit::even(num_experts, ranks, 1).
  for (int r = 0; r < placement.ranks_; ++r) {
    const int64_t first = static_cast<int64_t>(num_experts) * r / placement.ranks_;
    const int64_t end = static_cast<int64_t>(num_experts) * (r + 1) / placement.ranks_;
    for (int64_t e = first; e < end; ++e) placement.default_[e] = {r};
  }
  return placement;
}

Result<ExpertPlacement> ExpertPlacement::balanced(const std::vector<ExpertLoad::Layer>& load,
                                                  int num_experts, int ranks, int spare) {
  if (ranks < 1 || num_experts < ranks) {
    return invalid_argument(fmt::format("{} routed experts cannot be placed on {} ranks (each "
                                        "needs at least one)",
                                        num_experts, ranks));
  }
  if (spare < 0) return invalid_argument("the spare expert slots per rank must be >= 0");
  ExpertPlacement placement = contiguous(num_experts, ranks);
  const int slots = (num_experts + ranks - 1) / ranks + spare;
  for (const ExpertLoad::Layer& layer : load) {
    if (layer.counts.size() != static_cast<size_t>(num_experts)) {
      return invalid_argument(fmt::format("the measured load of layer {} has {} experts; the "
                                          "model has {}",
                                          layer.layer, layer.counts.size(), num_experts));
    }
    if (layer.layer < 0 || layer.layer >= kMaxLayers) {
      return invalid_argument(fmt::format("layer {} in the measured load", layer.layer));
    }
    if (layer.total() == 0) continue;
    // Copies: each extra one to the expert with the most selections per copy.
    std::vector<int> copies(num_experts, 1);
    for (int extra = 0; extra < spare * ranks; ++extra) {
      int best = -1;
      double best_share = 0;
      for (int e = 0; e < num_experts; ++e) {
        const double share = static_cast<double>(layer.counts[e]) / copies[e];
        if (copies[e] < ranks && share > best_share) best = e, best_share = share;
      }
      if (best < 0) break;
      ++copies[best];
    }
    // Copies heaviest first (ties: lower id first), each to the least loaded rank that has a
    // free slot and no copy of that expert yet.
    struct Copy {
      double share;
      int expert;
    };
    std::vector<Copy> order;
    for (int e = 0; e < num_experts; ++e) {
      for (int c = 0; c < copies[e]; ++c) {
        order.push_back({static_cast<double>(layer.counts[e]) / copies[e], e});
      }
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const Copy& a, const Copy& b) { return a.share > b.share; });
    Owners owners(num_experts);
    std::vector<double> rank_load(ranks, 0.0);
    std::vector<int> used(ranks, 0);
    for (const Copy& copy : order) {
      int chosen = -1;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<int>& held = owners[copy.expert];
        if (used[r] >= slots || std::find(held.begin(), held.end(), r) != held.end()) continue;
        if (chosen < 0 || rank_load[r] < rank_load[chosen] ||
            (rank_load[r] == rank_load[chosen] && used[r] < used[chosen])) {
          chosen = r;
        }
      }
      // No rank left for another copy (the free slots are on its owners): it is dropped, and
      // the expert's tokens split over the copies it has. A first copy always finds a slot.
      if (chosen < 0) continue;
      owners[copy.expert].push_back(chosen);
      rank_load[chosen] += copy.share;
      ++used[chosen];
    }
    for (std::vector<int>& ranks_of : owners) std::sort(ranks_of.begin(), ranks_of.end());
    if (placement.layer_index_.size() <= static_cast<size_t>(layer.layer)) {
      placement.layer_index_.resize(static_cast<size_t>(layer.layer) + 1, -1);
    }
    placement.layer_index_[layer.layer] = static_cast<int>(placement.layers_.size());
    placement.layers_.push_back(std::move(owners));
  }
  return placement;
}

const ExpertPlacement::Owners& ExpertPlacement::layer_owners(int layer) const {
  const int index = layer >= 0 && static_cast<size_t>(layer) < layer_index_.size()
                        ? layer_index_[layer]
                        : -1;
  return index >= 0 ? layers_[index] : default_;
}

const std::vector<int>& ExpertPlacement::owners(int layer, int expert) const {
  return layer_owners(layer)[expert];
}

bool ExpertPlacement::owns(int layer, int expert, int rank) const {
  const std::vector<int>& held = owners(layer, expert);
  return std::find(held.begin(), held.end(), rank) != held.end();
}

int ExpertPlacement::replicas() const {
  int extra = 0;
  for (const Owners& layer : layers_) {
    for (const std::vector<int>& held : layer) extra += static_cast<int>(held.size()) - 1;
  }
  return extra;
}

int ExpertPlacement::replicas(int first_layer, int end_layer) const {
  int extra = 0;
  for (int layer = std::max(first_layer, 0);
       layer < std::min(end_layer, static_cast<int>(layer_index_.size())); ++layer) {
    if (layer_index_[layer] < 0) continue;
    for (const std::vector<int>& held : layers_[layer_index_[layer]]) {
      extra += static_cast<int>(held.size()) - 1;
    }
  }
  return extra;
}

double ExpertPlacement::rank_imbalance(const ExpertLoad::Layer& layer) const {
  const Owners& owners = layer_owners(layer.layer);
  std::vector<double> rank_load(ranks_, 0.0);
  for (size_t e = 0; e < owners.size() && e < layer.counts.size(); ++e) {
    for (const int r : owners[e]) {
      rank_load[r] += static_cast<double>(layer.counts[e]) / static_cast<double>(owners[e].size());
    }
  }
  const double total = std::accumulate(rank_load.begin(), rank_load.end(), 0.0);
  if (total <= 0) return 0;
  return *std::max_element(rank_load.begin(), rank_load.end()) * ranks_ / total;
}

std::string ExpertPlacement::describe(const std::vector<ExpertLoad::Layer>& load) const {
  const ExpertPlacement plain = contiguous(static_cast<int>(default_.size()), ranks_);
  double placed = 0, consecutive = 0;
  int measured = 0;
  for (const ExpertLoad::Layer& layer : load) {
    if (layer.total() == 0) continue;
    placed += rank_imbalance(layer);
    consecutive += plain.rank_imbalance(layer);
    ++measured;
  }
  if (measured == 0) return "routed experts in consecutive id ranges (no measured load)";
  return fmt::format("routed experts placed by measured load in {} layers, {} extra copies: the "
                     "most loaded rank at {:.2f}x the mean (consecutive ids: {:.2f}x), mean over "
                     "layers",
                     measured, replicas(), placed / measured, consecutive / measured);
}

Result<std::vector<ExpertLoad::Layer>> parse_expert_load(const std::string& json_text,
                                                         int num_experts) {
  boost::system::error_code error;
  const boost::json::value document = boost::json::parse(json_text, error);
  if (error) return invalid_argument(fmt::format("not JSON: {}", error.message()));
  const boost::json::object* report = document.if_object();
  if (const boost::json::array* entries = document.if_array()) {
    for (const boost::json::value& entry : *entries) {
      const boost::json::object* object = entry.if_object();
      const boost::json::value* test = object != nullptr ? object->if_contains("test") : nullptr;
      if (test != nullptr && test->is_string() && test->get_string() == "experts") report = object;
    }
  }
  const boost::json::value* layers = report != nullptr ? report->if_contains("layers") : nullptr;
  if (layers == nullptr || !layers->is_array()) {
    return invalid_argument("no expert load in it: expected GET /admin/experts's object or "
                            "`tachyon bench --json`'s output (an entry with \"test\": \"experts\")");
  }
  std::vector<ExpertLoad::Layer> out;
  for (const boost::json::value& value : layers->get_array()) {
    const boost::json::object* object = value.if_object();
    const boost::json::value* layer = object != nullptr ? object->if_contains("layer") : nullptr;
    const boost::json::value* counts = object != nullptr ? object->if_contains("counts") : nullptr;
    if (layer == nullptr || !layer->is_int64() || counts == nullptr || !counts->is_array()) {
      return invalid_argument("each layer needs an integer \"layer\" and a \"counts\" array");
    }
    if (layer->get_int64() < 0 || layer->get_int64() >= kMaxLayers) {
      return invalid_argument(fmt::format("layer {} is out of range", layer->get_int64()));
    }
    ExpertLoad::Layer parsed;
    parsed.layer = static_cast<int>(layer->get_int64());
    for (const boost::json::value& count : counts->get_array()) {
      if (count.is_int64() && count.get_int64() >= 0) {
        parsed.counts.push_back(static_cast<uint64_t>(count.get_int64()));
      } else if (count.is_uint64()) {
        parsed.counts.push_back(count.get_uint64());
      } else {
        return invalid_argument(fmt::format("layer {}: counts must be integers >= 0",
                                            parsed.layer));
      }
    }
    if (parsed.counts.size() != static_cast<size_t>(num_experts)) {
      return invalid_argument(fmt::format("layer {} has {} counts; the model has {} routed experts",
                                          parsed.layer, parsed.counts.size(), num_experts));
    }
    out.push_back(std::move(parsed));
  }
  return out;
}

}  // namespace tachyon
