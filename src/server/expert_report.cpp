#include "server/expert_report.h"

#include <fmt/format.h>

#include "models/expert_cache.h"
#include "models/expert_load.h"

namespace tachyon::server {
namespace {

std::string with_layer(std::string_view labels, int layer) {
  return labels.empty() ? fmt::format("layer=\"{}\"", layer)
                        : fmt::format("{},layer=\"{}\"", labels, layer);
}

void append_series(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, std::string_view labels, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                     labels, value);
}

}  // namespace

boost::json::value expert_cache_json(const DecoderModel& model) {
  const ExpertCache* cache = model.expert_cache();
  if (cache == nullptr) return nullptr;
  const ExpertCache::Counters c = cache->counters();
  const uint64_t lookups = c.hits + c.misses;
  return boost::json::object{
      {"hits", c.hits},
      {"misses", c.misses},
      {"hit_rate", lookups > 0 ? static_cast<double>(c.hits) / static_cast<double>(lookups) : 0.0},
      {"bytes_read", c.bytes_read},
      {"prefetches", c.prefetches},
      {"resident_bytes", c.resident_bytes},
      {"capacity_bytes", c.capacity_bytes},
      {"expert_bytes", c.expert_bytes},
      {"slots", cache->num_slots()}};
}

boost::json::object expert_rebalance_json(const ExpertRebalance& done) {
  return boost::json::object{{"object", "expert.rebalance"},
                             {"layers", done.layers},
                             {"replicas", done.replicas},
                             {"rank_imbalance_before", done.imbalance_before},
                             {"rank_imbalance_after", done.imbalance_after},
                             {"seconds", done.seconds},
                             {"max_rank_weights_mib", done.max_rank_weights_mib}};
}

boost::json::object expert_report_json(const DecoderModel& model, const ExpertLoadReport& load) {
  boost::json::array layers;
  double max_imbalance = 0, sum_imbalance = 0;
  int measured = 0;
  for (size_t i = 0; i < load.layers.size(); ++i) {
    const ExpertLoad::Layer& layer = load.layers[i];
    const double imbalance = layer.imbalance();
    if (layer.total() > 0) {
      max_imbalance = std::max(max_imbalance, imbalance);
      sum_imbalance += imbalance;
      ++measured;
    }
    boost::json::object entry{
        {"layer", layer.layer},
        {"selections", layer.total()},
        {"imbalance", imbalance},
        {"counts", boost::json::array(layer.counts.begin(), layer.counts.end())}};
    // Expert parallelism: how evenly the ranks share the layer's pairs with today's placement.
    if (load.rank_imbalance[i] > 0) entry["rank_imbalance"] = load.rank_imbalance[i];
    layers.push_back(std::move(entry));
  }
  boost::json::object report{{"layers", std::move(layers)},
                             {"max_imbalance", max_imbalance},
                             {"mean_imbalance", measured > 0 ? sum_imbalance / measured : 0.0},
                             {"cache", expert_cache_json(model)}};
  if (load.expert_parallel) {
    report["placement"] = boost::json::object{{"ranks", load.ranks},
                                              {"measured", load.placed_by_load},
                                              {"replicas", load.replicas}};
  }
  return report;
}

std::string render_expert_metrics(const DecoderModel& model, const ExpertLoadReport& load,
                                  std::string_view labels) {
  std::string out;
  const std::vector<ExpertLoad::Layer>& layers = load.layers;
  if (!layers.empty()) {
    out += "# HELP tachyon:expert_imbalance Most chosen routed expert's selections over the "
           "mean, per MoE layer, since start (1: even).\n# TYPE tachyon:expert_imbalance gauge\n";
    for (const ExpertLoad::Layer& layer : layers) {
      out += fmt::format("tachyon:expert_imbalance{{{}}} {}\n", with_layer(labels, layer.layer),
                         layer.imbalance());
    }
    out += "# HELP tachyon:expert_selections_total Routed-expert choices (tokens times experts "
           "per token), per MoE layer.\n# TYPE tachyon:expert_selections_total counter\n";
    for (const ExpertLoad::Layer& layer : layers) {
      out += fmt::format("tachyon:expert_selections_total{{{}}} {}\n",
                         with_layer(labels, layer.layer), layer.total());
    }
  }
  if (load.expert_parallel) {
    out += "# HELP tachyon:expert_rank_imbalance The most loaded expert-parallel rank's share of "
           "the layer's selections over the mean share, with the current placement (1: even).\n"
           "# TYPE tachyon:expert_rank_imbalance gauge\n";
    for (size_t i = 0; i < layers.size(); ++i) {
      if (load.rank_imbalance[i] <= 0) continue;  // not measured yet
      out += fmt::format("tachyon:expert_rank_imbalance{{{}}} {}\n",
                         with_layer(labels, layers[i].layer), load.rank_imbalance[i]);
    }
  }
  const ExpertCache* cache = model.expert_cache();
  if (cache == nullptr) return out;
  const ExpertCache::Counters c = cache->counters();
  const struct {
    const char* name;
    const char* type;
    const char* help;
    double value;
  } series[] = {
      {"tachyon:expert_cache_hits_total", "counter",
       "Chosen experts found resident (--experts-mem).", static_cast<double>(c.hits)},
      {"tachyon:expert_cache_misses_total", "counter", "Chosen experts read from the model file.",
       static_cast<double>(c.misses)},
      {"tachyon:expert_cache_read_bytes_total", "counter",
       "Bytes of experts read from the model file.", static_cast<double>(c.bytes_read)},
      {"tachyon:expert_cache_prefetches_total", "counter",
       "Experts read ahead from the model file (a step's misses, the next layer's likely ones).",
       static_cast<double>(c.prefetches)},
      {"tachyon:expert_cache_resident_bytes", "gauge", "Bytes of expert slots holding an expert.",
       static_cast<double>(c.resident_bytes)},
      {"tachyon:expert_cache_capacity_bytes", "gauge", "Bytes of all expert slots (--experts-mem).",
       static_cast<double>(c.capacity_bytes)},
  };
  for (const auto& s : series) append_series(out, s.name, s.type, s.help, labels, s.value);
  return out;
}

}  // namespace tachyon::server
