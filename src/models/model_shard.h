// Which part of a model this process computes when several processes run it together, and the
// communicators it computes with. Tensor parallelism (TP) splits every matrix by output rows:
// each rank computes its rows of a product from the whole input and the ranks exchange their
// rows (all-gather) where the next product needs the whole vector. Each row is the same dot
// product as in one process, so the logits are the same bits (unlike splitting by columns,
// whose partial sums an all-reduce would add in another order). Pipeline parallelism (PP)
// gives each stage a range of layers; the residual stream goes from stage to stage.
//
// World ranks: rank = stage * tp_size + tp_rank; rank 0 (stage 0, TP rank 0) is the leader,
// which schedules and samples; the others follow it (ShardFollower).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "models/expert_placement.h"
#include "models/model_config.h"

namespace tachyon {

// Consecutive row ranges, one per part: part p has rows [begin[p], begin[p + 1]).
struct RowSplit {
  std::vector<int64_t> begin;  // [parts + 1]

  int parts() const { return static_cast<int>(begin.size()) - 1; }
  int64_t first(int part) const { return begin[part]; }
  int64_t count(int part) const { return begin[part + 1] - begin[part]; }
  int64_t total() const { return begin.back(); }
  // `total` rows in `parts` ranges as even as whole `unit`s allow (smaller units, down to
  // single rows, when total is no multiple of it or has fewer units than parts).
  static RowSplit even(int64_t total, int parts, int64_t unit);
};

// How expert-parallel ranks exchange the routed experts' output rows; every choice gives the
// same bits (each token's experts are summed in id order by one rank).
enum class ExpertExchange {
  kAuto,       // by the step's bytes (DecoderModel::exchange_to_token_owners)
  kAllGather,  // every pair's row to every rank; each rank sums every token
  kAllToAll,   // each row to the rank summing its token, then the sums all-gathered
};

struct ModelShard {
  int tp_rank = 0;
  int tp_size = 1;
  int pp_stage = 0;
  int pp_size = 1;
  int first_layer = 0;  // this stage's layers: [first_layer, end_layer)
  int end_layer = 0;
  // TP: the rows of each kind each TP rank owns. KV heads go whole, their query heads with them;
  // MLA's one KV head (the latent) is every rank's, its query heads are split.
  RowSplit kv_heads;     // of config.num_kv_heads (MLA: the whole, on every rank)
  RowSplit heads;        // of config.num_heads
  bool latent_cache = false;  // MLA: every TP rank computes and caches the whole latent
  RowSplit hidden_rows;  // of the attention output's and the FFN down's hidden_size rows
  RowSplit ffn_rows;     // of the FFN's gate and up rows (ffn_size), in whole blocks of the
                         // down projection's 8-bit input
  RowSplit vocab_rows;   // of the embedding's and the output's rows
  // Expert parallelism: each TP rank holds whole routed experts of every MoE layer (the router
  // and shared experts are on every rank): `expert_placement` says which (MoE models only; by
  // default `experts`, consecutive ids of config.moe.num_experts; or placed by a measured load,
  // hot ones on several ranks).
  RowSplit experts;
  std::shared_ptr<const ExpertPlacement> expert_placement;
  int expert_spare = 0;  // --expert-replicas: the placement's spare slots per rank and layer
  ExpertExchange expert_exchange = ExpertExchange::kAuto;
  // Every rank of the job (the leader's calls, stage to stage), and this stage's TP ranks.
  // Null in one process.
  dist::Communicator* world = nullptr;
  dist::Communicator* tensor_group = nullptr;

  // The whole model in one process.
  static ModelShard whole(const ModelConfig& config);
  // World rank `rank`'s part for --tp `tp_size` --pp `pp_size`; a clear error when the model
  // cannot be split so (fewer KV heads than TP ranks, fewer layers than stages, an architecture
  // whose split is not built yet). Stages get about equal weights: `layer_bytes` (each layer's
  // bytes, then the output projection's: num_layers + 1 values, e.g. from the file's tensors),
  // else parameter counts from the config.
  static Result<ModelShard> plan(const ModelConfig& config, int tp_size, int pp_size, int rank,
                                 const std::vector<double>& layer_bytes = {});

  bool distributed() const { return tp_size * pp_size > 1; }
  bool leader() const { return tp_rank == 0 && pp_stage == 0; }
  bool first_stage() const { return pp_stage == 0; }
  bool last_stage() const { return pp_stage == pp_size - 1; }
  int world_rank(int stage, int tp) const { return stage * tp_size + tp; }
  int num_layers() const { return end_layer - first_layer; }
  // This TP rank's heads and sizes.
  int local_kv_heads() const {
    return static_cast<int>(latent_cache ? kv_heads.total() : kv_heads.count(tp_rank));
  }
  int first_kv_head() const { return latent_cache ? 0 : static_cast<int>(kv_heads.first(tp_rank)); }
  int local_heads() const { return static_cast<int>(heads.count(tp_rank)); }
  int first_head() const { return static_cast<int>(heads.first(tp_rank)); }
  bool owns_head(int h) const { return h >= first_head() && h < first_head() + local_heads(); }
  // Whether routed expert `e` of model layer `layer` lives on this rank.
  bool owns_expert(int layer, int e) const {
    return expert_placement != nullptr && expert_placement->owns(layer, e, tp_rank);
  }
  // "stage 0 of 2 (layers 0-14), TP rank 1 of 2: KV heads 2-2, ..." for logs.
  std::string describe(const ModelConfig& config) const;
};

}  // namespace tachyon
