// What a MoE model's experts are doing, for users sizing --experts-mem and looking for hot
// experts: per-layer selection counts and imbalance (DecoderModel::expert_load) and the expert
// cache's counters (DecoderModel::expert_cache), as JSON (GET /admin/experts, `tachyon bench
// --json`) and as Prometheus series (/metrics). Safe to call while the engine runs.
#pragma once

#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "models/decoder_model.h"

namespace tachyon::server {

// {"layers": [{"layer", "selections", "imbalance", "counts": [...], "rank_imbalance" (expert
// parallelism)}, ...], "max_imbalance", "mean_imbalance", "cache": {...} or null, "placement":
// {"ranks", "measured", "replicas"} (expert parallelism)} of `load`
// (DecoderModel::expert_load_report); a dense model gives empty layers.
boost::json::object expert_report_json(const DecoderModel& model, const ExpertLoadReport& load);

// What POST /admin/experts/rebalance did: {"object": "expert.rebalance", "layers", "replicas",
// "rank_imbalance_before", "rank_imbalance_after", "seconds", "max_rank_weights_mib"}.
boost::json::object expert_rebalance_json(const ExpertRebalance& done);

// The expert cache's counters alone, or null without --experts-mem.
boost::json::value expert_cache_json(const DecoderModel& model);

// tachyon:expert_imbalance{layer=...} gauges, tachyon:expert_selections_total{layer=...}
// counters, tachyon:expert_rank_imbalance{layer=...} under expert parallelism (every layer of
// `load`: under --pp gathered from every stage) and, with --experts-mem, the cache's series;
// nothing for a dense model.
std::string render_expert_metrics(const DecoderModel& model, const ExpertLoadReport& load,
                                  std::string_view labels);

}  // namespace tachyon::server
