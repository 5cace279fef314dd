// The serving engine's thread-safe front. One engine thread runs EngineCore's loop (scheduler,
// KV cache manager, model runner); any thread may submit and cancel requests and read their
// outputs from the RequestStream it gets back.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/histogram.h"
#include "core/thread_pool.h"
#include "kv_cache/kv_disk_tier.h"
#include "models/decoder_model.h"
#include "runtime/engine_options.h"
#include "runtime/engine_request.h"
#include "runtime/request_stream.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

class EngineCore;

// The draft model of SpeculativeMode::kDraft, with its tokenizer (whose vocabulary must be the
// model's). Both must outlive the engine.
struct DraftModelRef {
  DecoderModel* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
};

// Counters and gauges for /metrics, read at any time from any thread.
struct EngineMetrics {
  int num_running = 0;
  int num_waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;          // held by running requests
  int64_t kv_blocks_cached = 0;        // free but holding reusable prefix blocks
  int64_t kv_bytes_per_token = 0;      // keys and values of every layer (MLA: its latent)
  int64_t kv_block_bytes = 0;          // of one block
  // Sliding-window models whose local layers have a pool of their own (only the windows are
  // kept there): its blocks; kv_blocks_* and kv_bytes_per_token above are the global layers'.
  int64_t kv_local_blocks_total = 0;
  int64_t kv_local_blocks_used = 0;
  int64_t kv_local_blocks_cached = 0;
  int64_t kv_local_block_bytes = 0;
  uint64_t prompt_tokens_total = 0;    // prompt tokens of admitted requests
  uint64_t prefix_cache_queried_tokens_total = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hit_tokens_total = 0;      // of those, found in the cache
  uint64_t prefix_cache_disk_tokens_total = 0;     // of those, read from the disk tier
  // The disk tier (--kv-disk), when enabled.
  bool kv_disk_enabled = false;
  int64_t kv_disk_limit_bytes = 0;
  KvDiskCounters kv_disk;
  uint64_t generation_tokens_total = 0;
  uint64_t steps_total = 0;
  uint64_t preemptions_total = 0;
  uint64_t snapkv_compactions_total = 0;    // prompts SnapKV compressed
  uint64_t snapkv_evicted_tokens_total = 0;  // positions per KV head they dropped
  uint64_t requests_finished_total = 0;
  Histogram::Snapshot tokens_per_step;
  // Speculative decoding, per DraftSource: draft tokens verified, accepted, and drafts (the
  // mean accepted length is accepted / drafts).
  std::array<uint64_t, kNumDraftSources> draft_tokens_total{};
  std::array<uint64_t, kNumDraftSources> accepted_draft_tokens_total{};
  std::array<uint64_t, kNumDraftSources> drafts_total{};
};

class Engine {
 public:
  // The model, tokenizer and pool must outlive the engine; the engine thread is the only user
  // of the model and the pool from now on. Allocates the KV block pool (fails when the
  // requested memory holds no block or cannot be reserved). max_context() is the smaller of
  // the model's context (or options.max_context) and what the whole pool holds, so a request
  // alone always fits.
  // With options.speculative.mode kDraft, `draft` must name the draft model (it gets a KV
  // cache of as many blocks as the model's, on top of the model's KV memory).
  static Result<std::unique_ptr<Engine>> create(DecoderModel& model, const Tokenizer& tokenizer,
                                                ThreadPool& pool, EngineOptions options,
                                                DraftModelRef draft = {});
  ~Engine();  // stops the engine thread; unfinished requests end with kCancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors (returned at once, nothing queued): empty prompt or token ids
  // outside the vocabulary (kInvalidArgument); prompt + 1 token longer than max_context()
  // (kOutOfRange, message names both numbers); bad sampling values (kInvalidArgument); the
  // waiting queue is full or the engine is shutting down (kUnavailable). `notify` is called
  // on the engine thread whenever the stream gets a new event.
  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request,
                                                std::function<void()> notify = {});

  // Stops a request: it ends with a finishing event carrying kCancelled, and its KV blocks
  // are freed within one engine step. Unknown or finished ids are ignored.
  void cancel(RequestId id);

  // Runs `task` on the engine thread between two steps, with the engine's model (the only time
  // another caller may change it: nothing else runs on it meanwhile); returns at once. A task
  // still queued when the engine stops is dropped (destroyed without running).
  void run_between_steps(std::function<void(DecoderModel&)> task);

  // For when the engine thread cannot be reached: it waits inside a step for another process of
  // a distributed job that is gone. Every request submitted and not yet finished ends now, from
  // the calling thread, with `reason`; later submits fail with kUnavailable.
  void abandon(const Status& reason);
  // Stops the engine thread, waiting at most `limit`: false (the thread still running, the
  // engine not to be destroyed) when it is stuck in a step.
  bool stop_within(std::chrono::milliseconds limit);

  // Longest prompt + generated sequence a request may have.
  int max_context() const;
  EngineMetrics metrics() const;
  const EngineOptions& options() const;

 private:
  Engine() = default;

  std::unique_ptr<EngineCore> core_;
  std::thread thread_;
  std::atomic<bool> thread_done_{false};
  // Streams handed out, for abandon(); expired ones are pruned as more are added.
  std::mutex streams_mutex_;
  std::vector<std::weak_ptr<RequestStream>> streams_;
  size_t prune_at_ = 64;
  std::optional<Status> abandoned_;  // abandon()'s reason
};

}  // namespace tachyon
