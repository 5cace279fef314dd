// Picks each step's work under a token budget, with no prefill/decode phases: running requests
// first (decodes, one token each, then prompt chunks), then waiting ones while budget, sequence
// slots and KV blocks last. Priorities order both queues (high, normal, low). Within a
// priority, tenants share by weighted fair queuing: the tenant that has been served the fewest
// tokens (divided by its weight) goes first, so a heavy tenant cannot starve a light one; a
// tenant's own requests are first come, first served. When KV blocks run out, the lowest-priority, most
// recently arrived running request is preempted: its blocks are released (full ones stay in
// the prefix cache) and it is recomputed later from its tokens, so its output does not change.
// A waiting request may likewise preempt running requests of a lower priority to be admitted.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "kv_cache/kv_block_pool.h"
#include "scheduler/prefix_block_source.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_output.h"

namespace tachyon {

struct SchedulerConfig {
  int max_batch_tokens = 256;    // new tokens per step
  int max_running_requests = 64;
  int block_size = 16;
  // Tokens (÷ weight) a tenant returning from idle may be served ahead of the busiest ones.
  double burst_credit_tokens = 512;
  // While tenants of one priority compete, those ahead of the least-served one get at most
  // this many prompt tokens per step (0: no cap). Short steps mean that a light tenant's new
  // request waits little for the step in progress, and then gets the full budget itself.
  int contended_prompt_tokens = 64;
  // A light tenant (served less than the busiest, i.e. behind the virtual clock) counts as
  // competing for this long after its last request left: a client sending one request after
  // another is not forgotten between them.
  double tenant_linger_seconds = 10.0;
  // Speculative decoding: a decoding request's draft tokens are added to the step only while
  // at most this many requests decode, no prompt work is pending (such steps are
  // compute-bound: verifying drafts there costs what it would save) and the KV pool has blocks
  // for them without preempting anyone. 0: never.
  int max_speculative_sequences = 0;
  // Sliding-window models: the local layers' window in tokens. Their blocks come from a pool
  // of their own, and a request holds only those its next tokens can see (Request::local_blocks);
  // a prefix-cache hit needs the global blocks of the whole prefix and the local blocks of its
  // last window. 0: no local layers.
  int window = 0;
};

struct SchedulerCounters {
  uint64_t prefix_queried_tokens = 0;  // prompt tokens looked up at first admission
  uint64_t prefix_hit_tokens = 0;      // of those, found cached
  uint64_t prefix_source_tokens = 0;   // prompt tokens read from the PrefixBlockSource
  uint64_t preemptions = 0;
};

class Scheduler {
 public:
  // `local_pool`: the local layers' blocks (with config.window > 0).
  Scheduler(SchedulerConfig config, KvBlockPool& pool, KvBlockPool* local_pool = nullptr);

  // Where prefix blocks missing from RAM are looked up next (null: nowhere). Must outlive the
  // scheduler.
  void set_prefix_block_source(PrefixBlockSource* source) { source_ = source; }

  // Queues a request (state kWaiting, no blocks, tokens = its prompt).
  void add(std::unique_ptr<Request> request);
  // Removes a request wherever it is and releases its blocks. Unknown ids are ignored.
  void remove(RequestId id);
  Request* find(RequestId id);

  // The next step's work; `now` is a monotonic clock in seconds (it only measures how long a
  // tenant has been away).
  SchedulerOutput schedule(double now);
  // After the model ran `output`: advances num_computed_tokens (less each item's rejected
  // drafts, whose now unneeded blocks go back to the pool) and names newly full blocks for the
  // prefix cache (appended to `named` when given).
  void on_step_done(const SchedulerOutput& output, std::vector<NamedBlock>* named = nullptr);

  // Whether a step scheduled now may carry draft tokens (see max_speculative_sequences).
  bool may_speculate() const;

  // SnapKV's new blocks for a request: `fresh` for its compacted positions after its first
  // `num_shared_blocks` blocks (which stay), `num_slots` positions in all; with a local pool,
  // `local` for the local layers' blocks from `first_local_block` on (the window of the slot
  // after the last; the blocks before it are kNoBlock).
  struct CompactionBlocks {
    std::vector<BlockId> fresh;
    std::vector<BlockId> local;
    int first_local_block = 0;
  };
  // nullopt when a pool is short (nothing changes).
  std::optional<CompactionBlocks> blocks_for_compaction(int num_shared_blocks, int num_slots);
  // Then, once the runtime wrote them: the request runs on its shared blocks and the new ones;
  // its earlier blocks go back to the pools, still named (their exact keys stay in the prefix
  // cache); its later tokens' slots are offset by what was dropped.
  void compact(Request* request, int num_shared_blocks, CompactionBlocks blocks, int num_slots);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }

  // Blocks needed to hold `num_tokens` positions.
  int blocks_for(int num_tokens) const {
    return (num_tokens + config_.block_size - 1) / config_.block_size;
  }

 private:
  struct ServeOrder {  // high priority first, then earlier arrival
    bool operator()(const Request* a, const Request* b) const {
      if (a->priority != b->priority) return a->priority < b->priority;
      return a->arrival < b->arrival;
    }
  };
  // Fair order: priority, then the tenant's virtual time, then arrival.
  bool fairly_before(const Request* a, const Request* b) const;
  double virtual_time(uint64_t tenant) const;
  // The waiting request to admit next (waiting_ must not be empty).
  std::set<Request*, ServeOrder>::iterator next_waiting();
  void tenant_arrives(const Request& request);
  void tenant_leaves(const Request& request);
  void advance_virtual_clock();
  // True when a present tenant of the request's priority has been served less than its own:
  // its prompt work is then capped at contended_prompt_tokens per step.
  bool yields_to_lighter_tenant(const Request* request) const;

  // Schedules `num_new` tokens of a running request, preempting the least urgent requests
  // while blocks are short; false when the request itself had to be preempted.
  bool schedule_running(Request* request, int num_new, SchedulerOutput& output, int& budget);
  // Admits a waiting request (its cached prefix already taken) with up to `budget_share` new
  // tokens; false (its blocks released) when they do not fit.
  bool admit(Request* request, int budget_share, SchedulerOutput& output, int& budget);
  void add_to_step(Request* request, int num_new, SchedulerOutput& output, int& budget,
                   int num_drafts = 0);
  // Whether this step may carry draft tokens (see max_speculative_sequences).
  bool may_speculate(int num_decoding) const;
  // The running request to preempt first: lowest priority, latest arrival.
  Request* least_urgent_running() const;
  // Preempts `victim`, taking it out of the step being built.
  void preempt_for_step(Request* victim, SchedulerOutput& output, int& budget);
  // Moves a running request back to waiting, releasing its blocks.
  void preempt(Request* request);
  // Releases all its blocks (num_computed_tokens back to 0).
  void release_blocks(Request* request);
  // Takes the longest run of cached blocks that starts the request's tokens (leaving at least
  // its last token to compute), from RAM or else the prefix block source, and sets
  // num_computed_tokens accordingly.
  void take_cached_prefix(Request* request);
  // Hashes of the request's full blocks up to `num_blocks`, computing missing ones.
  void extend_block_hashes(Request* request, int num_blocks);
  // The sink policy's moves: drops enough of the request's oldest computed tokens after its
  // sink for `num_new` more positions (see Request::sink_tokens); the moved blocks' key shifts
  // (and private copies of shared ones) go to `output`. False when a copy found no free block.
  bool drop_for_sink(Request* request, int num_new, SchedulerOutput& output);
  // One computed block of a sink drop in `pool` (the local layers' when `local`): its first
  // `count` keys turned back by `delta`, in a private copy if it is shared. False when no block
  // is free for the copy.
  bool move_block(KvBlockPool& pool, BlockId& block_id, int count, int delta, bool local,
                  SchedulerOutput& output);
  // Tokens the sink policy drops at once: an eighth of the window (whole blocks, at least one),
  // so that a key is turned back a few times in its life, not once per block.
  int sink_drop_chunk(const Request& request) const;
  // Grows the request's block table to cover `num_tokens` positions (and its local one, after
  // freeing the local blocks no token still to compute can see); false, with nothing taken, if
  // a pool is short.
  bool grow_blocks(Request* request, int num_tokens);
  // The first block a token at `position` sees in the local layers.
  int first_window_block(int position) const {
    return std::max(0, position - config_.window + 1) / config_.block_size;
  }
  // Whether the local blocks a token at block `num_blocks`'s start sees (and a sink request's
  // sink blocks) are all cached, in the local pool or the prefix block source.
  bool window_cached(Request* request, int num_blocks) const;
  // Takes those local blocks of a prefix hit of `num_blocks` blocks into request->local_blocks
  // (the source filling the ones RAM lacks): -1, or the index of a block it could not have
  // (then none is held).
  int take_local_blocks(Request* request, int num_blocks);
  // Whether a hit ending at a block whose window starts at block `first_window` needs block
  // `index`'s local part.
  bool local_block_wanted(const Request& request, int index, int first_window) const {
    return index < local_sink_blocks(request) || index >= first_window;
  }
  // The leading local blocks a sink request keeps for good: once a drop moves later tokens
  // down, its sink can be inside a local layer's window again.
  int local_sink_blocks(const Request& request) const {
    return request.sink_tokens / config_.block_size;
  }

  SchedulerConfig config_;
  KvBlockPool& pool_;
  KvBlockPool* local_pool_;  // null without local layers
  PrefixBlockSource* source_ = nullptr;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // kept in ServeOrder
  std::set<Request*, ServeOrder> waiting_;
  SchedulerCounters counters_;
  struct Tenant {
    double virtual_time = 0;  // tokens computed for it / weight
    int num_requests = 0;     // waiting or running
    Priority priority = Priority::kNormal;  // of its latest request
    double left_at = 0;  // `now` when its last request left
    bool light_when_left = false;  // it was behind the virtual clock then
  };
  // A tenant with no request still counts as competing (see tenant_linger_seconds).
  bool lingers(const Tenant& tenant) const;
  std::unordered_map<uint64_t, Tenant> tenants_;
  double virtual_clock_ = 0;  // virtual time of the least-served active tenant, monotonic
  uint64_t step_ = 0;
  double now_ = 0;  // as of the latest schedule()
  // Tokens given to each tenant in the step being scheduled (÷ weight), so that fairness also
  // holds within one step.
  std::unordered_map<uint64_t, double> step_charge_;
};

}  // namespace tachyon
