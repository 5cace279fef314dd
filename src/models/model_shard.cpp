#include "models/model_shard.h"

#include <algorithm>

#include <fmt/format.h>

namespace tachyon {

RowSplit RowSplit::even(int64_t total, int parts, int64_t unit) {
  // Smaller units where whole ones do not divide the rows or leave a part none.
  while (unit > 1 && (total % unit != 0 || total / unit < parts)) unit = unit >= 16 ? unit / 4 : 1;
  const int64_t units = total / unit;
  RowSplit split;
  split.begin.resize(static_cast<size_t>(parts) + 1);
  for (int p = 0; p <= parts; ++p) split.begin[p] = units * p / parts * unit;
  return split;
}

namespace {

// Rows of a split go in multiples of this where the sizes allow: the kernels' repacked tiles
// (16 rows) never straddle two ranks, so each row is computed as in one process.
constexpr int64_t kRowUnit = 16;

// FFN rows in whole blocks of the down projection's 8-bit input (256 values for K-quants, 32
// otherwise), so that each rank quantizes its own columns of that input and the ranks exchange
// them 8-bit (DecoderModel::gather_quantized_input). The plan does not know the weights' types:
// 256-row blocks only where they split the rows exactly evenly (else a K-quant model's down
// input goes as f32 rows), 32-row ones where those do or leave at most a block's difference,
// and otherwise the 16-row tiles of the other splits.
int64_t ffn_row_unit(const ModelConfig& config, int tp_size) {
  constexpr int64_t kKQuantBlock = 256;
  constexpr int64_t kQuantBlock = 32;
  if (config.ffn_size % (kKQuantBlock * tp_size) == 0) return kKQuantBlock;
  if (config.ffn_size % kQuantBlock == 0) return kQuantBlock;
  return kRowUnit;
}

// The weights layer `layer` reads per token, as a count of parameters (the routed experts'
// chosen share): what a pipeline stage's time and memory grow with.
double layer_parameters(const ModelConfig& config, int layer) {
  const double hidden = config.hidden_size;
  double attention;
  if (config.mla.enabled()) {
    const LatentAttentionConfig& mla = config.mla;
    const double query = mla.q_lora_rank > 0
                             ? hidden * mla.q_lora_rank +
                                   static_cast<double>(mla.q_lora_rank) * config.num_heads *
                                       mla.qk_head_dim()
                             : hidden * config.num_heads * mla.qk_head_dim();
    attention = query + hidden * mla.latent_size() +
                static_cast<double>(config.num_heads) * mla.kv_lora_rank *
                    (mla.qk_nope_head_dim + mla.v_head_dim) +
                hidden * config.num_heads * mla.v_head_dim;
  } else {
    attention = hidden * (2.0 * config.q_size() + 2.0 * config.kv_size());
  }
  const MixtureOfExpertsConfig& moe = config.moe;
  const double ffn = moe.layer_has_experts(layer)
                         ? 3.0 * hidden *
                               (static_cast<double>(moe.experts_per_token) * moe.expert_ffn_size +
                                moe.shared_ffn_size)
                         : 3.0 * hidden * config.ffn_size;
  return attention + ffn;
}

}  // namespace

ModelShard ModelShard::whole(const ModelConfig& config) {
  ModelShard shard;
  shard.end_layer = config.num_layers;
  shard.kv_heads = RowSplit::even(config.num_kv_heads, 1, 1);
  shard.heads = RowSplit::even(config.num_heads, 1, 1);
  shard.latent_cache = config.mla.enabled();
  shard.hidden_rows = RowSplit::even(config.hidden_size, 1, 1);
  shard.ffn_rows = RowSplit::even(config.ffn_size, 1, 1);
  shard.vocab_rows = RowSplit::even(config.vocab_size, 1, 1);
  shard.experts = RowSplit::even(std::max(config.moe.num_experts, 0), 1, 1);
  if (config.moe.enabled()) {
    shard.expert_placement = std::make_shared<const ExpertPlacement>(
        ExpertPlacement::contiguous(config.moe.num_experts, 1));
  }
  return shard;
}

Result<ModelShard> ModelShard::plan(const ModelConfig& config, int tp_size, int pp_size,
                                    int rank, const std::vector<double>& layer_bytes) {
  if (tp_size < 1 || pp_size < 1) {
    return invalid_argument(fmt::format("--tp {} --pp {}: both must be at least 1", tp_size,
                                        pp_size));
  }
  if (rank < 0 || rank >= tp_size * pp_size) {
    return invalid_argument(fmt::format("rank {} of a job of {} ranks", rank, tp_size * pp_size));
  }
  if (pp_size > config.num_layers) {
    return invalid_argument(fmt::format("--pp {}: the model has only {} layers, one stage needs "
                                        "at least one",
                                        pp_size, config.num_layers));
  }
  if (tp_size > 1) {
    if (config.mla.enabled() && config.num_heads < tp_size) {
      return invalid_argument(fmt::format("--tp {}: the model has {} attention heads; each TP "
                                          "rank needs at least one (use --tp {} at most, or --pp)",
                                          tp_size, config.num_heads, config.num_heads));
    }
    if (config.moe.enabled() && config.moe.num_experts < tp_size) {
      return invalid_argument(fmt::format("--tp {}: the model has {} routed experts; each rank "
                                          "needs at least one",
                                          tp_size, config.moe.num_experts));
    }
    if (!config.mla.enabled() && config.num_kv_heads < tp_size) {
      return invalid_argument(fmt::format("--tp {}: the model has {} KV heads; each TP rank needs "
                                          "at least one (use --tp {} at most, or --pp)",
                                          tp_size, config.num_kv_heads, config.num_kv_heads));
    }
    if (config.hidden_size < tp_size || config.ffn_size < tp_size ||
        config.vocab_size < tp_size) {
      return invalid_argument(fmt::format("--tp {}: the model is too small to split so", tp_size));
    }
  }
  ModelShard shard;
  shard.tp_size = tp_size;
  shard.pp_size = pp_size;
  shard.tp_rank = rank % tp_size;
  shard.pp_stage = rank / tp_size;
  // Stages of about equal weights per token (the last one also has the output projection),
  // each at least one layer: boundary s where the running sum first reaches s/pp of the total.
  std::vector<double> cost = layer_bytes;
  if (cost.size() != static_cast<size_t>(config.num_layers) + 1) {
    cost.clear();
    for (int i = 0; i < config.num_layers; ++i) cost.push_back(layer_parameters(config, i));
    cost.push_back(static_cast<double>(config.vocab_size) * config.hidden_size);
  }
  std::vector<int> boundary(pp_size + 1, config.num_layers);
  boundary[0] = 0;
  double total = 0;
  for (double c : cost) total += c;
  double sum = 0;
  int stage = 1;
  for (int i = 0; i < config.num_layers && stage < pp_size; ++i) {
    sum += cost[i];
    // Stage `stage` starts after layer i once its predecessors hold their share, leaving a
    // layer for each stage after it.
    if (sum >= total * stage / pp_size || config.num_layers - (i + 1) == pp_size - stage) {
      boundary[stage++] = i + 1;
    }
  }
  shard.first_layer = boundary[shard.pp_stage];
  shard.end_layer = boundary[shard.pp_stage + 1];
  // Whole 64-row units where the sizes allow: the kernels' repacked tiles then never straddle
  // two ranks.
  shard.latent_cache = config.mla.enabled();
  if (shard.latent_cache) {
    shard.kv_heads = RowSplit::even(config.num_kv_heads, 1, 1);
    shard.heads = RowSplit::even(config.num_heads, tp_size, 1);
  } else {
    // A KV head's query heads go with it.
    shard.kv_heads = RowSplit::even(config.num_kv_heads, tp_size, 1);
    const int64_t group = config.num_heads / std::max(config.num_kv_heads, 1);
    for (int64_t first : shard.kv_heads.begin) shard.heads.begin.push_back(first * group);
  }
  shard.hidden_rows = RowSplit::even(config.hidden_size, tp_size, kRowUnit);
  // The FFN's rows split evenly, not to make up for uneven KV heads (3 over 2 ranks): the ranks
  // meet at every exchange, so each phase between two exchanges takes its slowest rank's time
  // and a rank with fewer attention rows cannot use its lead in the FFN phase (measured on the
  // default model: TP=2 pp512 +6% over gate/up rows balanced against the attention's).
  shard.ffn_rows = RowSplit::even(config.ffn_size, tp_size, ffn_row_unit(config, tp_size));
  shard.vocab_rows = RowSplit::even(config.vocab_size, tp_size, kRowUnit);
  shard.experts = RowSplit::even(std::max(config.moe.num_experts, 0), tp_size, 1);
  if (config.moe.enabled()) {
    shard.expert_placement = std::make_shared<const ExpertPlacement>(
        ExpertPlacement::contiguous(config.moe.num_experts, tp_size));
  }
  return shard;
}

std::string ModelShard::describe(const ModelConfig& config) const {
  std::string text = fmt::format("stage {} of {} (layers {}-{})", pp_stage, pp_size, first_layer,
                                 end_layer - 1);
  if (tp_size > 1) {
    const std::string kv = latent_cache ? std::string("the latent (every rank's)")
                                        : fmt::format("KV heads {}-{}", first_kv_head(),
                                                      first_kv_head() + local_kv_heads() - 1);
    text += fmt::format(", TP rank {} of {}: {} (query heads {}-{}), hidden rows "
                        "{}-{}, FFN rows {}-{}, vocabulary rows {}-{}",
                        tp_rank, tp_size, kv, first_head(), first_head() + local_heads() - 1,
                        hidden_rows.first(tp_rank),
                        hidden_rows.first(tp_rank) + hidden_rows.count(tp_rank) - 1,
                        ffn_rows.first(tp_rank), ffn_rows.first(tp_rank) + ffn_rows.count(tp_rank) - 1,
                        vocab_rows.first(tp_rank),
                        vocab_rows.first(tp_rank) + vocab_rows.count(tp_rank) - 1);
    if (config.moe.enabled() && expert_placement && expert_placement->measured()) {
      text += fmt::format(", routed experts placed by measured load ({} extra copies)",
                          expert_placement->replicas());
    } else if (config.moe.enabled()) {
      text += fmt::format(", routed experts {}-{}", experts.first(tp_rank),
                          experts.first(tp_rank) + experts.count(tp_rank) - 1);
    }
  }
  return text;
}

}  // namespace tachyon
