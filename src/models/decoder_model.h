// A Llama-family decoder-only transformer (Llama 2/3, Mistral, SmolLM, Qwen2/2.5, Qwen3,
// Gemma 3, and with MLA and experts DeepSeek-V3 and Kimi-K2): pre-norm attention with grouped
// KV heads and RoPE (global or sliding-window), then a SwiGLU (GeGLU) feed-forward block.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/aligned_allocator.h"
#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul_input.h"
#include "kv_cache/kv_cache.h"
#include "kv_cache/paged_kv_cache.h"
#include "model_files/gguf_file.h"
#include "models/decoder_weights.h"
#include "models/expert_load.h"
#include "models/forward_batch.h"
#include "models/layers.h"
#include "models/model_config.h"
#include "models/decompressed_latent_attention.h"
#include "models/model_shard.h"
#include "models/rotary_embedding.h"

namespace tachyon {

using TokenIndex = int32_t;

// Whose arithmetic a forward pass follows: tachyon's own kernels, or llama.cpp's operation for
// operation (kernels/cpu/llamacpp_arithmetic.h: the same logits, bit for bit, on the models
// its CPU backend runs row by row; slower, for checking against llama.cpp).
enum class Numerics { kNative, kLlamaCpp };

// How MLA's attention runs (--mla-attention). kAbsorbed: every token scores and sums in the
// latent space (queries folded through W_UK), reading the cached latents in place: a token's
// bits never depend on how its prompt was cut into chunks. kDecompressed: every run of new
// tokens through keys and values decompressed from the latents (DecompressedLatentAttention;
// chunk-invariant too, but every call decompresses the whole context: slow decoding).
// kAuto: each run the one with fewer multiply-adds, so long prompt chunks decompressed and
// decodes absorbed (a prompt's bits then depend on where its chunks were cut).
enum class MlaAttention { kAbsorbed, kDecompressed, kAuto };

// What DecoderModel::rebalance_experts did, over every rank of the job.
struct ExpertRebalance {
  int layers = 0;    // MoE layers placed by their measured load
  int replicas = 0;  // expert copies beyond one per expert, over those layers
  // The most loaded rank's expected share of the pairs over the mean share (1: even), by the
  // load measured so far, averaged over those layers: with the old placement and the new one.
  double imbalance_before = 0;
  double imbalance_after = 0;
  double seconds = 0;               // the slowest rank's time
  double max_rank_weights_mib = 0;  // the largest rank's weights in memory afterwards
};

// The routed experts' load in every MoE layer of the model, with how evenly the TP ranks share
// each under the current placement (DecoderModel::expert_load_report).
struct ExpertLoadReport {
  std::vector<ExpertLoad::Layer> layers;  // every MoE layer's selection counts
  std::vector<double> rank_imbalance;     // [layers]: the most loaded rank's share over the
                                          // mean (ExpertPlacement); 0: one process or no load
  bool expert_parallel = false;           // experts placed over TP ranks
  int ranks = 1;                          // TP ranks
  bool placed_by_load = false;            // by --expert-placement or a rebalance
  int replicas = 0;                       // expert copies beyond one per expert, all stages
};

class DecoderModel {
 public:
  // The model reads its weights from `file`, which must outlive it.
  // `quantize`: float matrices quantized at load to that type (DecoderWeights::load).
  // `experts_memory` (--experts-mem): the routed experts stay in the file, at most that much of
  // them resident (ExpertCache); empty: all resident.
  // `shard` (several processes running the model together; null: the whole model): this
  // process computes only that part (ModelShard) and exchanges the rest with the others over
  // shard->world / tensor_group, which must outlive the model. The leader's forward() and
  // forward_batch() first send the call to every follower (ShardFollower runs it there).
  static Result<std::unique_ptr<DecoderModel>> load(const GgufFile& file,
                                                    std::optional<DType> quantize = std::nullopt,
                                                    const MemoryAmount& experts_memory = {},
                                                    const ModelShard* shard = nullptr);
  // From a Hugging Face folder (config.json + safetensors).
  static Result<std::unique_ptr<DecoderModel>> load(const HfCheckpoint& checkpoint,
                                                    std::optional<DType> quantize = std::nullopt,
                                                    const ModelShard* shard = nullptr);
  // The leader tells the followers to stop.
  ~DecoderModel();

  const ModelConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }
  const ModelShard& shard() const { return shard_; }
  // How often each routed expert was chosen (MoE models; empty otherwise). Thread-safe.
  const ExpertLoad& expert_load() const { return expert_load_; }
  ExpertLoad& expert_load() { return expert_load_; }
  // Expert parallelism (--tp ranks holding routed experts): places the experts over the TP
  // ranks anew by the load measured since start (ExpertPlacement::balanced, `spare` copies per
  // rank and layer) and loads each rank's new experts from the model file, freeing those it no
  // longer holds. The leader calls it between forward passes and sends it to every follower
  // (ShardFollower runs it there). The tokens stay the same: where a pair is computed never
  // changes its bits. Errors, before anything changes: one process, no routed experts, a model
  // from a Hugging Face folder, --experts-mem.
  Result<ExpertRebalance> rebalance_experts(int spare);
  // The routed experts' placement over the TP ranks now (null in one process). Thread-safe
  // (rebalance_experts replaces it).
  std::shared_ptr<const ExpertPlacement> expert_placement() const;
  // Its spare slots per rank and layer (--expert-replicas, then the last rebalance's).
  // Thread-safe.
  int expert_spare() const;
  // The expert load of every stage. Under --pp the leader's counts cover only its own layers,
  // so it asks the other stages (a call to every follower; ShardFollower answers): then only
  // between forward passes, on the thread that runs them. Without stages, any thread.
  ExpertLoadReport expert_load_report() const;
  // With --experts-mem, the resident experts' cache (its counters are thread-safe); else null.
  const ExpertCache* expert_cache() const { return weights_.expert_cache.get(); }

  // Switches the arithmetic of forward() (forward_batch() stays native). kLlamaCpp needs every
  // weight matrix in Q4_1 or Q8_0 and RoPE without YaRN; an error says what else it found.
  Status set_numerics(Numerics numerics);
  Numerics numerics() const { return numerics_; }

  // Chooses MLA's attention path (MlaAttention; kAbsorbed until called). Anything else needs a
  // model with MLA (an error otherwise) and builds each layer's W_UK in f32 (the keys'
  // decompression: qk_nope_head_dim x kv_lora_rank floats per head and layer).
  // `cost_factor`: kAuto's weight on the decompressed path's multiply-adds (tests move it).
  Status set_mla_attention(MlaAttention mode, double cost_factor = kDecompressedCostFactor);
  MlaAttention mla_attention() const { return mla_attention_; }
  // Whether a run of `num_tokens` new tokens after `start_position` cached ones takes the
  // decompressed path (kAuto: when its multiply-adds, weighted by kDecompressedCostFactor, are
  // fewer than the absorbed path's).
  bool decompresses(int start_position, int num_tokens) const;
  // The decompressed path's multiply-adds are worth this many of the absorbed path's: its f32
  // matmuls ran ~60 G multiply-adds/s on a 2-core Xeon against the absorbed attention kernel's
  // ~105 (docs/benchmarks.md, the MLA prompt-path section).
  static constexpr double kDecompressedCostFactor = 1.7;

  // A cache for `capacity` positions, stored as f16 (default) or f32 (MLA: the latent once);
  // of a shard's layers and KV heads only.
  KvCache make_cache(int capacity, DType type = DType::kF16) const {
    return KvCache(shard_.num_layers(), attention_shape().num_kv_heads, config_.head_size,
                   capacity, type, config_.kv_values_are_keys());
  }
  // A paged cache of `num_blocks` blocks (and `num_local_blocks` for sliding-window layers, if
  // the model has them) for forward_batch(), of a shard's layers and KV heads only.
  Result<std::unique_ptr<PagedKvCache>> make_paged_cache(int num_blocks, int block_size,
                                                         DType type,
                                                         int num_local_blocks = 0) const;

  // Runs `tokens` at positions start_position.. of the sequence cached in `cache` (whose
  // positions before start_position are already filled) and writes the logits of the last
  // `num_logits` tokens: f32 [num_logits, vocab] (1: the next-token prediction; tokens.size():
  // all of them). Token ids must be valid and the positions must fit in the cache; checked.
  // `position_offset`: the tokens' RoPE positions are their cache positions plus this (a cache
  // compacted by SnapKV holds fewer positions than the sequence has tokens). `observer`, when
  // given, sees each layer's queries after attention: f32 [tokens, q_size], RoPE applied
  // (native numerics; SnapKV's scores).
  using AttentionObserver = FunctionRef<void(int layer, const float* queries, int num_tokens)>;
  // `final_hidden` as in forward_batch().
  Status forward(std::span<const TokenIndex> tokens, int start_position, KvCache& cache,
                 ThreadPool& pool, int num_logits, std::vector<float>& logits,
                 int position_offset = 0, const AttentionObserver* observer = nullptr,
                 std::vector<float>* final_hidden = nullptr);

  // Query heads, KV heads, head size and softmax scale of the attention as the cache sees it
  // (MLA: one latent KV head; a tensor-parallel shard: its own heads); with `layer`, also its
  // sliding window if it is a local layer.
  AttentionShape attention_shape() const;
  AttentionShape attention_shape(int layer) const;

  // Turns cached keys (f32 rows [count, kv_size], as a cache stores them: rotated) back by
  // `delta` positions in place: what the keys of tokens moved from position p to p - delta
  // would have been (RoPE's rotations compose), with the RoPE of the cache's layer
  // `cache_layer` (a shard's layers count from its first; sliding-window layers have their
  // own). MLA turns only the latent's rotary part. For caches that drop tokens from the
  // middle (the "sink" overflow policy).
  void shift_keys(float* keys, int count, int delta, int cache_layer) const;

  // Runs one engine step over many sequences whose keys and values live in the paged `cache`:
  // makes the batch's cache moves (block copies, key shifts), writes each new token's keys and
  // values to its slot, attends over each sequence's blocks,
  // and returns the logits of batch.logits_tokens: f32 [logits_tokens.size(), vocab]. Token
  // ids are checked; the block tables and slots are the caller's responsibility.
  // `observer` as in forward(), with the whole batch's queries.
  // `final_hidden`, when given, gets every token's last hidden state after the output norm
  // (what an MTP layer reads): f32 [num_tokens, hidden].
  Status forward_batch(const ForwardBatch& batch, PagedKvCache& cache, ThreadPool& pool,
                       std::vector<float>& logits, const AttentionObserver* observer = nullptr,
                       std::vector<float>* final_hidden = nullptr);
  // Multi-token prediction with MTP layer `mtp` (DeepSeek-V3's NextN, ModelConfig::
  // num_mtp_layers): each batch token t at position p is the token that followed position p,
  // and `trunk_hidden` (f32 [num_tokens, hidden]) the trunk's final hidden state at p (as
  // forward_batch's final_hidden gives it; for a guess after a guess, the MTP layer's own
  // `mtp_hidden` of the previous one). The layer's input is eh_proj · [enorm(embedding(t)),
  // hnorm(trunk_hidden)], then one decoder layer whose keys and values go in `cache` (one layer);
  // the logits of batch.logits_tokens (head_norm, then the head) guess the token after t.
  // `mtp_hidden`, when given, gets those tokens' hidden states before head_norm: f32
  // [logits_tokens, hidden].
  Status forward_mtp_batch(int mtp, const ForwardBatch& batch, const float* trunk_hidden,
                           PagedKvCache& cache, ThreadPool& pool, std::vector<float>& logits,
                           std::vector<float>* mtp_hidden = nullptr);
  // A paged cache for the MTP layers' keys and values (one layer per MTP layer).
  Result<std::unique_ptr<PagedKvCache>> make_mtp_cache(int num_blocks, int block_size,
                                                       DType type) const;

 private:
  DecoderModel(ModelConfig config, DecoderWeights weights, ModelShard shard);

  // Activations for a batch of tokens, reused across calls (64-byte aligned for the kernels).
  // Slots [first, end) of workspace_.expert_tokens, all of them one expert's pairs.
  struct ExpertSlots {
    int expert = 0;
    int first = 0;
    int end = 0;
  };
  struct Workspace {
    AlignedVector<float> residual;  // f32 [tokens, hidden]
    AlignedVector<float> normed;    // f32 [tokens, hidden]
    // `normed` as the products after a norm read it: each row quantized right after its norm
    // (native numerics only).
    kernels::MatmulInput normed_input;
    AlignedVector<float> query;      // f32 [tokens, q_size]
    AlignedVector<float> key;        // f32 [tokens, kv_size]
    AlignedVector<float> value;      // f32 [tokens, kv_size]
    AlignedVector<float> attention;  // f32 [tokens, q_size]
    AlignedVector<float> projected;  // f32 [tokens, hidden]
    AlignedVector<float> gate;       // f32 [tokens, ffn]
    AlignedVector<float> up;         // f32 [tokens, ffn]
    std::vector<float> rope_cos;     // f32 [tokens, rope dimensions/2]
    std::vector<float> rope_sin;     // f32 [tokens, rope dimensions/2]
    std::vector<float> local_rope_cos;  // the same for local layers' RoPE (Gemma 3)
    std::vector<float> local_rope_sin;
    std::vector<int> positions;
    // Tensor parallelism: this rank's rows of a product (f32 [tokens, local rows]), a whole
    // gathered input (f32 [tokens, max(q_size, ffn)]) and the rank-major rows gathered to TP
    // rank 0 (the logits).
    AlignedVector<float> partial;
    AlignedVector<float> gathered;
    AlignedVector<float> exchange;
    // gather_quantized_input: the whole input as its product's kernels read it, and this
    // rank's columns of it quantized (MatmulInput's block layout).
    kernels::MatmulInput gathered_input;
    AlignedVector<std::byte> quantized_block;
    std::vector<int64_t> block_bytes;  // [TP ranks] each rank's block
    // MLA (latent_attention_block).
    AlignedVector<float> query_a;       // f32 [tokens, q_lora_rank], normalised in place
    AlignedVector<float> query_heads;   // f32 [tokens, heads * qk_head_dim]
    AlignedVector<float> latent;        // f32 [tokens, kv_lora_rank + qk_rope_head_dim]
    AlignedVector<float> head_input;    // f32 [tokens, max(qk_nope_head_dim, kv_lora_rank)]
    AlignedVector<float> head_output;   // f32 [tokens, max(kv_lora_rank, v_head_dim)]
    AlignedVector<float> head_values;   // f32 [tokens, heads * v_head_dim]
    // The pass's runs of tokens that take the decompressed path (decompresses), and each one's
    // latents: f32 [start_position + num_tokens, latent_size], read from the cache by the
    // pass's Attend.
    struct LatentRun {
      int first_token = 0;
      int num_tokens = 0;
      int start_position = 0;
      int sequence = 0;  // in the pass's ForwardBatch (forward(): 0)
    };
    std::vector<LatentRun> latent_runs;
    std::vector<AlignedVector<float>> run_latents;
    // MoE (expert_feed_forward_block).
    AlignedVector<float> router_logits;  // f32 [tokens, experts]
    std::vector<int> chosen_experts;     // [tokens, experts_per_token], ascending per token
    std::vector<float> expert_weights;   // f32 [tokens, experts_per_token]
    std::vector<int> expert_tokens;      // the tokens of each expert, expert by expert
    std::vector<int> expert_offsets;     // [experts + 1] into expert_tokens
    std::vector<int> expert_next;        // [experts] the next free slot of each, while filling
    std::vector<float> expert_token_weights;  // the weight of each expert_tokens entry
    // Every (token, chosen expert) pair's row, expert by expert (expert_tokens' order).
    AlignedVector<float> expert_input;   // f32 [tokens * experts_per_token, hidden]
    AlignedVector<float> expert_output;  // f32 [tokens * experts_per_token, hidden]
    // Per chosen expert: its quantized gate/up input and down input (deques: MatmulInput
    // holds pointers into its own buffers, so it never moves), and the products of one pass.
    std::deque<kernels::MatmulInput> expert_gate_up_inputs;
    std::deque<kernels::MatmulInput> expert_down_inputs;
    std::vector<kernels::MatmulProduct> expert_products;
    std::vector<const kernels::MatmulInput*> expert_product_inputs;
    // --experts-mem: the step's chosen experts (ascending) and their resident matrices, and the
    // next layer's likely choice (its router on this layer's input) to read ahead.
    std::vector<int> step_experts;
    std::vector<ExpertSlots> step_slots;  // step_experts with all their slots
    // Expert parallelism: every rank's share of the pairs (by rank, then expert), this rank's,
    // and the rows in the ranks' order as exchanged (f32 [pairs, hidden]).
    std::vector<std::pair<int, ExpertSlots>> rank_slots;
    std::vector<ExpertSlots> own_slots;
    AlignedVector<float> expert_exchange;
    // The all-to-all exchange: per rank, the slots whose rows this rank sends it / receives
    // from it, in message order.
    std::vector<std::vector<int>> send_rows;
    std::vector<std::vector<int>> receive_rows;
    std::vector<ExpertCache::Resident> resident_experts;
    AlignedVector<float> next_router_logits;  // f32 [tokens, experts]
    std::vector<int> next_chosen;             // [experts_per_token]
    std::vector<float> next_weights;          // [experts_per_token]
    std::vector<char> next_wanted;            // [experts]
    std::vector<int> next_experts;            // those wanted, ascending
    // MTP (forward_mtp_batch).
    AlignedVector<float> mtp_input;      // f32 [tokens, 2 * hidden]: [enorm(embedding), hnorm(h)]
  };

  // Rows of `table` (the token embedding or an MTP layer's copy) for `tokens`, scaled as the
  // config says: f32 [tokens, hidden]. A tensor-parallel shard's table holds its vocabulary
  // rows: the others are zero here, and the TP ranks add theirs up (exact: one term is not 0).
  void embed(const kernels::WeightMatrix& table, std::span<const TokenIndex> tokens,
             float* out) const;
  // Tensor parallelism: out = every TP rank's `local` columns of a [num_tokens, split.total()]
  // product, rank after rank (local: f32 [num_tokens, split.count(own rank)]).
  void gather_columns(const float* local, int num_tokens, const RowSplit& split, float* out);
  // Tensor parallelism: `product`'s whole input (`split` by columns; `local` this rank's) ready
  // for its kernels in workspace_.gathered_input, each rank quantizing only its own columns and
  // the ranks exchanging the 8-bit blocks (3.2x fewer bytes than f32, the same bits as one
  // process quantizing whole rows). False, with nothing done, where that cannot be: the
  // product reads f32 input, a split falls inside a quantization block, or a rank runs the
  // portable level (the ranks agree at the first call).
  bool gather_quantized_input(const kernels::MatmulProduct& product, const float* local,
                              const RowSplit& split, int num_tokens, ThreadPool& pool);
  // The same collected on TP rank 0 only.
  void gather_columns_to_first(const float* local, int num_tokens, const RowSplit& split,
                               float* out);
  // The logits of `rows` (the last stage's projection; the leader's copy of them).
  void output_logits(std::span<const int> rows, std::vector<float>& logits, ThreadPool& pool);
  // forward_batch's layers (not the logits) over `batch`'s tokens.
  // `decompressed`: per sequence, whether its run takes MLA's decompressed path (a pipeline's
  // micro-batch pieces: their whole runs' choice); empty: decompresses() on each.
  Status run_batch_layers(const ForwardBatch& batch, PagedKvCache& cache, ThreadPool& pool,
                          const AttentionObserver* observer,
                          std::span<const char> decompressed = {});
  // Pipeline parallelism: forward_batch in micro-batches flowing through the stages.
  // The token indices where micro_batch_cuts cuts the step (0 first, num_tokens last).
  std::vector<int> micro_batch_cuts(const ForwardBatch& batch) const;
  Status forward_micro_batches(const ForwardBatch& batch, std::span<const int> cuts,
                               PagedKvCache& cache, ThreadPool& pool, std::vector<float>& logits);
  // The cache's index of model layer `layer` (a pipeline stage's cache holds its layers only).
  int cache_layer(int layer) const { return layer - shard_.first_layer; }
  // Pipeline parallelism: the leader's logits come from the last stage's first TP rank.
  void receive_logits(int count, std::vector<float>& logits);
  // out = norm(residual, output_norm) for every token: f32 [num_tokens, hidden].
  void normalize_final(int num_tokens, ThreadPool& pool, std::vector<float>& out);
  // Checks a batch's shape against `cache` and its token ids.
  Status check_batch(const ForwardBatch& batch, const PagedKvCache& cache) const;
  // Stores the keys and values of the batch's tokens [first, end) (workspace_.key, .value) in
  // `layer`'s cache; called for disjoint ranges from several threads at once.
  using StoreTokens = FunctionRef<void(int layer, int first, int end)>;
  // Prefetches, for writing, the cache lines `layer`'s store of the whole batch will write.
  using PrefetchStore = FunctionRef<void(int layer)>;
  // Batches of at most this many tokens prefetch their store's lines (attention_block; 32
  // sequences' decode step was 1-2% slower with it).
  static constexpr int kPrefetchStoreTokens = 8;
  // Fills workspace_.attention from workspace_.query for `layer`, whose keys and values are
  // stored.
  using Attend = FunctionRef<void(int layer)>;
  // Sizes the workspace for `num_tokens` and computes the RoPE angles of workspace_.positions.
  void prepare_workspace(int num_tokens);
  // One decoder layer on the residual stream (its attention, then its feed-forward block).
  void run_layer(const LayerWeights& layer, int layer_index, int num_tokens, bool add_projected,
                 StoreTokens store, PrefetchStore prefetch_store, Attend attend, ThreadPool& pool);
  // Embeds `tokens` (at workspace_.positions) and runs every layer; an io_error when an expert
  // could not be read from the file (--experts-mem).
  Status run_layers(std::span<const TokenIndex> tokens, StoreTokens store,
                  PrefetchStore prefetch_store, Attend attend, ThreadPool& pool);
  // logits = output · norm(residual row, norm_weight) for `rows`.
  void project_logits(std::span<const int> rows, const float* norm_weight,
                      const kernels::WeightMatrix& output, std::vector<float>& logits,
                      ThreadPool& pool);
  // Each block starts by adding the previous block's output (workspace_.projected) into the
  // residual stream, fused with its input norm (except the first layer's attention block,
  // which has nothing to add), and ends with its output in workspace_.projected.
  void attention_block(const LayerWeights& layer, int layer_index, int num_tokens,
                       bool add_projected, StoreTokens store, PrefetchStore prefetch_store,
                       Attend attend, ThreadPool& pool);
  void feed_forward_block(const LayerWeights& layer, int num_tokens, ThreadPool& pool);
  // The same blocks for MLA (attention over each token's cached latent, queries absorbed) and
  // for a layer of experts (only the chosen ones run, on the tokens that chose them).
  void latent_attention_block(const LayerWeights& layer, int layer_index, int num_tokens,
                              bool add_projected, StoreTokens store, Attend attend,
                              ThreadPool& pool);
  void expert_feed_forward_block(const LayerWeights& layer, int num_tokens, ThreadPool& pool);
  // The `chosen` experts on their slots (ascending; workspace_.step_slots or an expert-parallel
  // rank's share of them): gate and up of all of them in one pass of the pool (SwiGLU as its
  // epilogue), then all downs in another, into their rows of workspace_.expert_output (f32
  // [pairs, hidden], expert_tokens' order).
  void run_chosen_experts(const ExpertWeights& experts, std::span<const ExpertSlots> chosen,
                          int num_tokens, ThreadPool& pool);
  // workspace_.projected (f32 [tokens, hidden]) = weight · input, where `local` holds this TP
  // rank's columns of the input (`split` by rank; the whole input in one process) and `weight`
  // this rank's hidden rows: the output projection of attention and the FFN's down.
  void project_to_hidden(const kernels::WeightMatrix& weight, const float* local,
                         const RowSplit& split, int num_tokens, ThreadPool& pool);
  // workspace_.projected's rows of tokens [token_begin, token_end) += their experts' outputs
  // (workspace_.expert_output) times their weights, in expert-id order.
  void add_expert_outputs(int token_begin, int token_end);
  // Expert parallelism: this rank's share of the step's pairs, then the exchange, after which
  // every rank has workspace_.projected whole (with the same bits as one process).
  void run_experts_over_ranks(const ExpertWeights& experts, int num_tokens, ThreadPool& pool);
  // Whether this step's exchange goes through send_expert_rows_to_token_owners (else
  // gather_expert_rows); ModelShard::expert_exchange, by the step's bytes when automatic.
  bool exchange_to_token_owners(int num_tokens) const;
  // Every rank's rows (`counts` / `offsets`: floats per rank in rank_slots' order) to every
  // rank, each back in its slot of workspace_.expert_output.
  void gather_expert_rows(std::span<const int> counts, std::span<const int> offsets);
  // Each row to the rank that sums its token (the tokens split in consecutive ranges; an
  // all-to-all), each rank sums its tokens' experts, then the sums are all-gathered: about 1/N
  // of the pairs' rows and one row per token move instead of every pair's row.
  void send_expert_rows_to_token_owners(int num_tokens);
  // Automatic exchange: the all-to-all when it saves each rank at least this many received
  // bytes; about what a link moves in one collective's latency (log2(N) messages of 2-25 us at
  // 50-3 GB/s: 0.2-0.3 MB at 8 ranks), so below it the all-gather's single collective wins.
  static constexpr double kAllToAllMinSavedBytes = 256 * 1024;
  // --experts-mem: asks the cache to read ahead the experts the router of the layer after
  // `experts`' would choose for this layer's input (workspace_.normed), if it has experts.
  void prefetch_next_experts(const ExpertWeights& experts, int num_tokens, ThreadPool& pool);
  // out[t] = w · x[t] for one of MLA's per-head matrices: x rows at `x_stride`, out rows at
  // `out_stride` (through workspace_.head_input / head_output).
  void multiply_head(const kernels::WeightMatrix& w, const float* x, int64_t x_stride,
                     int num_tokens, float* out, int64_t out_stride, ThreadPool& pool);
  // workspace_.gate = SwiGLU(gate, up) (GeGLU for Gemma) over columns [begin, end) of every
  // token's rows of `ffn` values (a matmul_many row epilogue: each thread on the rows it has
  // just computed).
  void swiglu_rows(int64_t ffn, int num_tokens, int64_t begin, int64_t end);
  // workspace_.projected = norm(projected, weight) token by token (Gemma's post norms).
  void normalize_projected(const float* weight, int num_tokens, ThreadPool& pool);
  // workspace_.normed = norm(residual (+= projected if `add_projected`), weight), token by token,
  // each row quantized right away for `consumers` (the products that read it next).
  void add_and_normalize(const float* weight, bool add_projected,
                         std::span<const kernels::MatmulProduct> consumers, int num_tokens,
                         ThreadPool& pool);
  // The operations whose arithmetic `numerics_` chooses.
  void normalize(const float* x, const float* weight, int size, float* out) const;
  void multiply(std::span<const kernels::MatmulProduct> products, const float* x,
                int num_tokens, ThreadPool& pool) const;
  // The products of workspace_.normed that add_and_normalize prepared it for; `epilogue` as in
  // kernels::matmul_many (native numerics only, else null).
  void multiply_normed(std::span<const kernels::MatmulProduct> products, int num_tokens,
                       ThreadPool& pool, const kernels::RowEpilogue* epilogue = nullptr);
  void rotate(float* heads, int num_heads, const float* cos_row, const float* sin_row) const;
  // body(first, end) over consecutive token ranges covering [0, num_tokens): one per thread
  // for a prompt, so element-wise work does not leave a core idle; inline for a few tokens,
  // where a round of the pool costs more than the rows. Rows are independent, so the results
  // are the same either way.
  // residual += projected for the batch's rows.
  void add_residual(int num_tokens, ThreadPool& pool);
  static void for_token_ranges(int num_tokens, ThreadPool& pool,
                               FunctionRef<void(int first, int end)> body);

  ModelConfig config_;
  DecoderWeights weights_;
  ModelShard shard_;
  const GgufFile* file_ = nullptr;  // the weights' file (GGUF models; rebalance_experts)
  mutable std::mutex placement_mutex_;  // guards shard_.expert_placement's replacement
  RowSplit query_rows_;       // the q_size rows by TP rank (its KV heads' query heads)
  RowSplit head_value_rows_;  // MLA: the heads' values (heads * v_head_dim) by TP rank
  // The key (and value) floats per token this rank caches: its KV heads', MLA's whole latent.
  int64_t local_kv_size() const {
    return static_cast<int64_t>(shard_.local_kv_heads()) * config_.head_size;
  }
  ForwardBatch micro_batch_;  // forward_micro_batches' current one (its vectors reused)
  RotaryEmbedding rope_;
  RotaryEmbedding local_rope_;  // local layers' (config_.local_rope)
  Workspace workspace_;
  Numerics numerics_ = Numerics::kNative;
  // gather_quantized_input: whether every TP rank's kernels read 8-bit input (none runs the
  // portable level's f32 oracle); unknown (-1) until the first exchange agrees on it.
  int ranks_quantize_input_ = -1;
  MlaAttention mla_attention_ = MlaAttention::kAbsorbed;
  double decompressed_cost_factor_ = kDecompressedCostFactor;
  DecompressedLatentAttention decompressed_attention_;
  ForwardBatch absorbed_batch_;  // run_batch_layers: the sequences not decompressed
  ExpertLoad expert_load_;
};

}  // namespace tachyon
