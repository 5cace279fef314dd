// The engine loop. One thread calls run(); it owns the scheduler, the KV block pool and cache,
// and the model runner. Other threads only reach it through submit(), cancel() and stop(),
// which pass through a locked inbox, and read metrics() snapshots.
//
// Each step: take new requests and cancellations from the inbox, fail requests past their
// deadline, let the scheduler pick the step's tokens, run the model once over all of them,
// then sample a token for every request whose known tokens are all computed, detokenize it,
// check stop conditions and push the result to the request's stream.
//
// Speculative decoding: after a request's sample, a proposer guesses its next tokens
// (request.draft_tokens); the next step computes them along with its last token. Sampling then
// walks the positions in order with the request's own sampler, exactly as it would one step
// at a time, and keeps going while each sample equals the guess at its position: every
// token, random draw, penalty, stop check and logprob is what it would have been without the
// guesses. The first sample that differs ends the walk; the guesses after it are dropped and
// their KV slots rolled back (Scheduler::on_step_done).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/histogram.h"
#include "core/thread_pool.h"
#include "kv_cache/kv_block_pool.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/decoder_model.h"
#include "runtime/engine.h"
#include "runtime/engine_options.h"
#include "runtime/disk_prefix_store.h"
#include "runtime/draft_model_runner.h"
#include "runtime/engine_request.h"
#include "runtime/model_runner.h"
#include "runtime/mtp_runner.h"
#include "runtime/request_stream.h"
#include "runtime/snap_kv.h"
#include "sampling/sampler.h"
#include "sampling/stop_condition.h"
#include "scheduler/scheduler.h"
#include "speculative/acceptance_rate.h"
#include "speculative/lookup_proposer.h"
#include "speculative/step_cost_model.h"
#include "speculative/suffix_cache.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

class EngineCore {
 public:
  // `draft_runner`: the draft model, for SpeculativeMode::kDraft (else null). `disk_tier`: the
  // prefix cache's disk tier (else null).
  EngineCore(DecoderModel& model, const Tokenizer& tokenizer, ThreadPool& pool,
             EngineOptions options, std::unique_ptr<PagedKvCache> cache, int max_context,
             std::unique_ptr<DraftModelRunner> draft_runner = nullptr,
             std::unique_ptr<KvDiskTier> disk_tier = nullptr,
             std::unique_ptr<MtpRunner> mtp_runner = nullptr);

  // Thread-safe.
  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request, std::function<void()> notify);
  void cancel(RequestId id);
  // Runs `task` on the engine thread before the next step (Engine::run_between_steps).
  void run_between_steps(std::function<void(DecoderModel&)> task);
  void stop();
  EngineMetrics metrics() const;
  int max_context() const { return max_context_; }
  const EngineOptions& options() const { return options_; }

  // The loop; returns after stop(), having ended every unfinished request with kCancelled.
  void run();

 private:
  struct Submission {
    RequestId id;
    EngineRequest request;
    Sampler sampler;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point submitted;
  };
  // What the engine keeps per request beside the scheduler's Request.
  struct Active {
    EngineRequest request;
    Sampler sampler;
    StopCondition stop;
    StreamingDetokenizer detokenizer;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point submitted;
    double queue_seconds = 0;  // set when first scheduled
    bool scheduled = false;
    int num_completion_tokens = 0;
    // Speculative decoding, when on for this request: prompt lookup (proposer), or the draft
    // model or the MTP layer (model_drafts).
    std::unique_ptr<LookupProposer> proposer = nullptr;
    bool model_drafts = false;
    AcceptanceRate acceptance = AcceptanceRate();
    DraftSource draft_source = DraftSource::kNgram;  // of request.draft_tokens
    uint64_t partition = 0;  // its tenant and cache salt: whose suffix-cache text it may see
    int draft_tokens = 0;
    int accepted_draft_tokens = 0;
    // With the sink policy the scheduler's tokens are what the cache holds: the whole prompt
    // and output are kept here for the sampler (penalties see what they would without it).
    std::vector<TokenId> history = {};
    // SnapKV: the attention its observation window paid so far (the window may span prompt
    // chunks), and the position the next chunk must start at to add to it.
    std::unique_ptr<SnapKvScorer> snapkv = nullptr;
    int snapkv_next = 0;
  };
  // A sampling request's step: its new tokens and text, and whether it finished.
  struct Sampled {
    RequestId id;
    EngineOutput output;
  };

  // Moves the inbox into the scheduler; false when stopping.
  bool take_inbox();
  void step();
  // Samples the item's positions (its last known token's, then each draft's while the samples
  // confirm them), appending the tokens to the request and setting item.num_rejected_tokens.
  // `logits_row` is the item's first logits row; advanced past its rows.
  Sampled sample(ScheduledRequest& item, Active& active, int& logits_row);
  // Room for guesses after the request's known tokens: the context, and max_tokens (the last
  // token is sampled, not guessed).
  int draft_room(const Request& request, const Active& active) const;
  // Guesses the request's next tokens into request.draft_tokens by prompt lookup.
  void propose(Request& request, Active& active);
  // The draft model guesses for these continuing requests, together.
  void propose_with_draft_model(const std::vector<RequestId>& ids);
  // The MTP layer takes in the step's hidden states of `items` (scheduled requests that draft
  // with it: their index in the step and id) and guesses for those of `guessing` (continuing
  // requests that sampled).
  void advance_mtp(const std::vector<std::pair<size_t, RequestId>>& items,
                   const std::vector<RequestId>& guessing);
  // Before scheduling: cuts each decoding request's drafts to the length worth verifying in
  // this step (choose_draft_lengths over the measured step costs).
  void size_drafts();
  // Ends a request: the final event (with `output`'s fields) goes out, its blocks go back.
  void finish(RequestId id, EngineOutput output);
  // Fills output's counts (prompt, cached, completion, draft tokens; queue time).
  void set_counts(const Request& request, const Active& active, EngineOutput& output) const;
  void fail_expired();
  // SnapKV: a request whose prompt (longer than the budget) the step finishes, scored by the
  // attention its last tokens pay while the step runs.
  // A request whose step computes tokens of its SnapKV observation window.
  struct SnapKvJob {
    size_t item;  // in SchedulerOutput::scheduled and the runner's batch
    Request* request;
    SnapKvScorer* scorer;  // its Active's
    int length;            // the tokens SnapKV compacts: the last window token's end
    bool last;             // the step computes the window's last token: compact after it
  };
  std::vector<SnapKvJob> snapkv_jobs(const SchedulerOutput& output);
  // Adds this layer's attention of the jobs' window tokens.
  void observe_for_snapkv(std::vector<SnapKvJob>& jobs, int layer, const float* queries);
  // Compacts the job's request to the budget (its shared prefix kept whole).
  void compact_for_snapkv(SnapKvJob& job);
  void publish_metrics(int step_tokens);

  DecoderModel& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  EngineOptions options_;
  int max_context_;
  std::vector<TokenId> end_of_generation_;

  std::unique_ptr<PagedKvCache> cache_;
  KvBlockPool block_pool_;
  std::unique_ptr<KvBlockPool> local_block_pool_;  // the local layers', if the cache splits them
  Scheduler scheduler_;
  ModelRunner runner_;
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;
  std::unique_ptr<SuffixCache> suffix_cache_;  // when options_.speculative.mode is kSuffix
  StepCostModel step_cost_;                    // seconds per step, by tokens computed
  std::unique_ptr<DraftModelRunner> draft_runner_;  // SpeculativeMode::kDraft
  std::unique_ptr<MtpRunner> mtp_runner_;           // SpeculativeMode::kMtp
  std::vector<float> trunk_hidden_;  // f32 [step tokens, hidden]: the step's final hidden states
  std::unique_ptr<DiskPrefixStore> disk_store_;     // --kv-disk
  std::vector<NamedBlock> named_blocks_;            // a step's newly full blocks (reused)
  uint64_t next_arrival_ = 0;
  uint64_t snapkv_compactions_ = 0;
  uint64_t snapkv_evicted_ = 0;  // positions (per KV head) dropped

  // Inbox, shared with other threads.
  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::vector<Submission> submissions_;
  std::vector<RequestId> cancellations_;
  std::vector<std::function<void(DecoderModel&)>> tasks_;
  bool stopping_ = false;
  RequestId next_id_ = 1;

  // Metrics, shared with other threads.
  mutable std::mutex metrics_mutex_;
  EngineMetrics metrics_;
  Histogram tokens_per_step_;
};

}  // namespace tachyon
