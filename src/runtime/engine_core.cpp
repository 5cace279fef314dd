#include "runtime/engine_core.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime/generator.h"

namespace tachyon {

EngineCore::EngineCore(DecoderModel& model, const Tokenizer& tokenizer, ThreadPool& pool,
                       EngineOptions options, std::unique_ptr<PagedKvCache> cache, int max_context,
                       std::unique_ptr<DraftModelRunner> draft_runner,
                       std::unique_ptr<KvDiskTier> disk_tier, std::unique_ptr<MtpRunner> mtp_runner)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(pool),
      options_(options),
      max_context_(max_context),
      end_of_generation_(Generator::end_of_generation_tokens(tokenizer.vocabulary())),
      cache_(std::move(cache)),
      block_pool_(cache_->num_blocks(), options.enable_prefix_cache),
      local_block_pool_(cache_->has_local_layers()
                            ? std::make_unique<KvBlockPool>(cache_->num_local_blocks(),
                                                            options.enable_prefix_cache)
                            : nullptr),
      scheduler_(
          [&] {
            SchedulerConfig config{options.max_batch_tokens, options.max_running_requests,
                                   options.block_size};
            if (options.speculative.enabled()) {
              config.max_speculative_sequences = options.speculative.max_sequences;
            }
            if (cache_->has_local_layers()) config.window = model.config().sliding_window;
            return config;
          }(),
          block_pool_, local_block_pool_.get()),
      runner_(model, *cache_, pool),
      draft_runner_(std::move(draft_runner)),
      mtp_runner_(std::move(mtp_runner)),
      tokens_per_step_(Histogram::exponential_bounds(1, 2, 12)) {
  if (disk_tier) {
    disk_store_ = std::make_unique<DiskPrefixStore>(std::move(disk_tier), *cache_);
    scheduler_.set_prefix_block_source(disk_store_.get());
    metrics_.kv_disk_enabled = true;
    metrics_.kv_disk_limit_bytes = disk_store_->tier().max_bytes();
    metrics_.kv_disk = disk_store_->tier().counters();
  }
  metrics_.kv_blocks_total = cache_->num_blocks();
  const int64_t layer_block_bytes = static_cast<int64_t>(
      PagedKvCache::block_bytes(1, model.config().kv_size(), options.block_size,
                                options.kv_cache_type, model.config().kv_values_are_keys()));
  int num_local_layers = 0;
  for (int layer = 0; layer < cache_->num_layers(); ++layer) num_local_layers += cache_->is_local(layer);
  metrics_.kv_block_bytes = layer_block_bytes * (model.config().num_layers - num_local_layers);
  metrics_.kv_bytes_per_token = metrics_.kv_block_bytes / options.block_size;
  metrics_.kv_local_blocks_total = cache_->num_local_blocks();
  metrics_.kv_local_block_bytes = layer_block_bytes * num_local_layers;
  metrics_.tokens_per_step = tokens_per_step_.snapshot();
  if (options.speculative.enabled() && options.speculative.mode == SpeculativeMode::kSuffix) {
    suffix_cache_ = std::make_unique<SuffixCache>(options.speculative.suffix_cache_tokens);
  }
}

Result<std::shared_ptr<RequestStream>> EngineCore::submit(EngineRequest request,
                                                           std::function<void()> notify) {
  const int num_prompt = static_cast<int>(request.prompt.size());
  if (num_prompt == 0) return invalid_argument("the prompt is empty");
  for (TokenId token : request.prompt) {
    if (!tokenizer_.is_valid(token)) {
      return invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", token,
                                          tokenizer_.vocabulary_size() - 1));
    }
  }
  if (request.sink && max_context_ < 4 * options_.block_size) {
    return invalid_argument(fmt::format(
        "the context of {} tokens is too small for the sink policy (at least {})", max_context_,
        4 * options_.block_size));
  }
  if (!request.sink && num_prompt + 1 > max_context_) {
    return out_of_range(fmt::format(
        "the prompt has {} tokens, but the context holds {} (prompt and at least one new token)",
        num_prompt, max_context_));
  }
  TACHYON_ASSIGN_OR_RETURN(Sampler sampler,
                           Sampler::create(request.sampling, tokenizer_.vocabulary_size()));
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  if (stopping_) return unavailable("the engine is shutting down");
  // Requests beyond the free running slots wait; at most max_waiting_requests of them.
  int num_queued;
  {
    std::lock_guard<std::mutex> metrics_lock(metrics_mutex_);
    num_queued = metrics_.num_waiting + metrics_.num_running - options_.max_running_requests;
  }
  num_queued += static_cast<int>(submissions_.size());
  if (num_queued >= options_.max_waiting_requests) {
    return unavailable(fmt::format("{} requests are already waiting", options_.max_waiting_requests));
  }
  const RequestId id = next_id_++;
  auto stream = std::make_shared<RequestStream>(id, std::move(notify));
  submissions_.push_back(
      {id, std::move(request), std::move(sampler), stream, std::chrono::steady_clock::now()});
  inbox_ready_.notify_one();
  return stream;
}

void EngineCore::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  cancellations_.push_back(id);
  inbox_ready_.notify_one();
}

void EngineCore::run_between_steps(std::function<void(DecoderModel&)> task) {
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  tasks_.push_back(std::move(task));
  inbox_ready_.notify_one();
}

void EngineCore::stop() {
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  stopping_ = true;
  inbox_ready_.notify_one();
}

EngineMetrics EngineCore::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  return metrics_;
}

bool EngineCore::take_inbox() {
  std::vector<Submission> submissions;
  std::vector<RequestId> cancellations;
  std::vector<std::function<void(DecoderModel&)>> tasks;
  {
    std::unique_lock<std::mutex> lock(inbox_mutex_);
    // Sleep only when there is nothing to do at all.
    inbox_ready_.wait(lock, [&] {
      return stopping_ || !submissions_.empty() || !cancellations_.empty() || !tasks_.empty() ||
             scheduler_.has_work();
    });
    if (stopping_) return false;
    submissions.swap(submissions_);
    cancellations.swap(cancellations_);
    tasks.swap(tasks_);
  }
  // No forward pass is in flight here.
  for (auto& task : tasks) task(model_);
  for (Submission& submission : submissions) {
    auto request = std::make_unique<Request>();
    request->id = submission.id;
    request->priority = submission.request.priority;
    request->tenant = submission.request.tenant;
    request->tenant_weight = submission.request.tenant_weight > 0 ? submission.request.tenant_weight : 1.0;
    request->arrival = next_arrival_++;
    request->tokens = submission.request.prompt;
    request->num_prompt_tokens = static_cast<int>(request->tokens.size());
    request->hash_root = BlockHash::root(submission.request.cache_salt);
    if (submission.request.sink) {
      request->sink_tokens = options_.block_size;
      request->max_positions = max_context_;
    }
    StopCondition stop(submission.request.sampling, end_of_generation_);
    const bool skip_special = submission.request.skip_special_tokens;
    auto active = std::make_unique<Active>(Active{std::move(submission.request),
                                                  std::move(submission.sampler), std::move(stop),
                                                  StreamingDetokenizer(tokenizer_, skip_special),
                                                  std::move(submission.stream),
                                                  submission.submitted});
    active->partition = std::hash<std::string>{}(active->request.cache_salt) *
                            0x9e3779b97f4a7c15ull ^
                        active->request.tenant;
    if (active->request.sink) active->history = active->request.prompt;
    // The first token's mask is built while the prompt runs.
    if (active->request.constraint) active->request.constraint->prepare_mask();
    if (options_.speculative.enabled() && active->request.speculate) {
      // The draft model's and MTP layer's caches cannot follow the sink policy's moves:
      // prompt lookup instead.
      if ((draft_runner_ || mtp_runner_) && !active->request.sink) {
        active->model_drafts = true;
        active->draft_source = mtp_runner_ ? DraftSource::kMtp : DraftSource::kDraft;
      } else {
        active->proposer = std::make_unique<LookupProposer>(
            options_.speculative.max_draft_tokens, suffix_cache_.get(), active->partition);
      }
    }
    active_.emplace(submission.id, std::move(active));
    scheduler_.add(std::move(request));
  }
  for (RequestId id : cancellations) {
    if (active_.count(id)) {
      EngineOutput output;
      output.status = cancelled("the request was cancelled");
      finish(id, std::move(output));
    }
  }
  return true;
}

void EngineCore::fail_expired() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<RequestId> expired;
  for (const auto& [id, active] : active_) {
    if (active->request.deadline && now >= *active->request.deadline) expired.push_back(id);
  }
  for (RequestId id : expired) {
    EngineOutput output;
    output.status = deadline_exceeded("the request ran past its time limit");
    finish(id, std::move(output));
  }
}

void EngineCore::set_counts(const Request& request, const Active& active,
                            EngineOutput& output) const {
  output.prompt_tokens = request.num_prompt_tokens;
  output.cached_prompt_tokens = request.num_cached_prompt_tokens;
  output.completion_tokens = active.num_completion_tokens;
  output.dropped_tokens = request.num_dropped_tokens;
  output.queue_seconds = active.queue_seconds;
  output.draft_tokens = active.draft_tokens;
  output.accepted_draft_tokens = active.accepted_draft_tokens;
}

void EngineCore::finish(RequestId id, EngineOutput output) {
  auto found = active_.find(id);
  if (found == active_.end()) return;
  Active& active = *found->second;
  if (const Request* request = scheduler_.find(id)) {
    set_counts(*request, active, output);
    // What it read and wrote is there for later requests of the same tenant to draft from.
    if (suffix_cache_ && active.proposer && output.status.ok()) {
      suffix_cache_->add(active.partition, request->tokens);
    }
  }
  if (!output.status.ok()) output.text += active.stop.flush();
  output.finished = true;
  if (draft_runner_) draft_runner_->release(id);
  if (mtp_runner_) mtp_runner_->release(id);
  const std::shared_ptr<RequestStream> stream = active.stream;
  scheduler_.remove(id);
  active_.erase(found);
  {
    // The gauges drop before the client hears the request finished: a client that reads
    // /metrics right after its last response sees it gone.
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    metrics_.num_running = scheduler_.num_running();
    metrics_.num_waiting = scheduler_.num_waiting();
    ++metrics_.requests_finished_total;
  }
  stream->push(std::move(output));
}

EngineCore::Sampled EngineCore::sample(ScheduledRequest& item, Active& active, int& logits_row) {
  Request& request = *item.request;
  const int num_drafts = item.num_draft_tokens;
  Sampled sampled{request.id, EngineOutput()};
  EngineOutput& output = sampled.output;
  int accepted = 0;
  for (int i = 0; i <= num_drafts; ++i) {
    const bool whole_history = active.request.sink;
    TokenConstraint* constraint = active.request.constraint.get();
    const TokenId token = active.sampler.sample(runner_.logits_for(logits_row + i),
                                                whole_history ? active.history : request.tokens,
                                                request.num_prompt_tokens, constraint);
    if (active.sampler.constraint_failed()) {
      // The grammar allows no token here (a grammar that can never end, or one whose only way
      // on is a token the vocabulary lacks): the request fails rather than break its format.
      output.text += active.stop.flush();
      output.status = Status(StatusCode::kInternal,
                             "the output's grammar allows no token at this point");
      output.finished = true;
      break;
    }
    request.tokens.push_back(token);
    if (whole_history) active.history.push_back(token);
    ++active.num_completion_tokens;
    output.tokens.push_back(token);
    if (active.request.sampling.logprobs) output.logprobs.push_back(active.sampler.last_logprobs());
    Result<std::string> piece = active.detokenizer.push(token);
    StopUpdate update = active.stop.push(token, piece.ok() ? *piece : std::string());
    output.text += update.text;
    if (update.finished()) {
      output.finish_reason = update.finish_reason;
      // Out of tokens in the middle of a character: its bytes become U+FFFD, as in a full decode.
      if (update.finish_reason == FinishReason::kLength) output.text += active.detokenizer.finish();
      output.finished = true;
      break;
    }
    if (constraint != nullptr && constraint->is_terminated()) {
      // It accepted an end-of-generation token the stop condition let through (ignore_eos):
      // the grammar allows nothing more.
      output.text += active.detokenizer.finish();
      output.text += active.stop.flush();
      output.finish_reason = FinishReason::kStop;
      output.finished = true;
      break;
    }
    if (!active.request.sink && request.num_tokens() >= max_context_) {
      // No room to compute another token.
      output.text += active.detokenizer.finish();
      output.text += active.stop.flush();
      output.finish_reason = FinishReason::kLength;
      output.finished = true;
      break;
    }
    // The next position's logits are valid only if this token is the draft they followed.
    if (i == num_drafts || token != request.draft_tokens[i]) break;
    ++accepted;
  }
  logits_row += num_drafts + 1;
  item.num_rejected_tokens = num_drafts - accepted;
  // The next token's mask is built while the next forward pass runs.
  if (active.request.constraint && !output.finished) active.request.constraint->prepare_mask();
  request.draft_tokens.clear();
  if (num_drafts > 0) {
    active.draft_tokens += num_drafts;
    active.accepted_draft_tokens += accepted;
    active.acceptance.observe(num_drafts, accepted);
    const int source = static_cast<int>(active.draft_source);
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    metrics_.draft_tokens_total[source] += num_drafts;
    metrics_.accepted_draft_tokens_total[source] += accepted;
    ++metrics_.drafts_total[source];
  }
  set_counts(request, active, output);
  return sampled;
}

int EngineCore::draft_room(const Request& request, const Active& active) const {
  int room = max_context_ - request.num_tokens() - 1;
  if (active.request.sampling.max_tokens) {
    room = std::min(room, *active.request.sampling.max_tokens - active.num_completion_tokens - 1);
  }
  return room;
}

void EngineCore::propose(Request& request, Active& active) {
  if (!active.proposer) return;
  active.proposer->propose(request.tokens, draft_room(request, active), request.draft_tokens);
  active.draft_source = active.proposer->source();
}

void EngineCore::propose_with_draft_model(const std::vector<RequestId>& ids) {
  if (ids.empty() || !scheduler_.may_speculate()) return;  // the next step would not verify
  std::vector<DraftModelRunner::Job> jobs;
  std::vector<double> acceptance;
  for (RequestId id : ids) {
    Request& request = *scheduler_.find(id);
    const Active& active = *active_.at(id);
    jobs.push_back({id, request.tokens, draft_room(request, active), &request.draft_tokens});
    acceptance.push_back(active.acceptance.value());
  }
  const int length =
      !options_.speculative.adaptive
          ? options_.speculative.max_draft_tokens
          : choose_draft_model_length(
                step_cost_, draft_runner_->pass_seconds(static_cast<int>(ids.size()), step_cost_),
                scheduler_.num_running(), acceptance, options_.speculative.max_draft_tokens);
  if (length == 0) return;
  if (!draft_runner_->propose(jobs, length).ok()) {
    // Not expected (the draft's inputs are the engine's own); no guesses this step, and the
    // draft's state for these sequences is rebuilt from scratch next time.
    for (DraftModelRunner::Job& job : jobs) {
      job.out->clear();
      draft_runner_->release(job.id);
    }
  }
}

void EngineCore::advance_mtp(const std::vector<std::pair<size_t, RequestId>>& items,
                             const std::vector<RequestId>& guessing) {
  const bool verify_next = scheduler_.may_speculate();
  const ForwardBatch& batch = runner_.batch();
  const int64_t hidden = model_.config().hidden_size;
  std::vector<MtpRunner::Job> jobs;
  std::vector<double> acceptance;
  int num_guessing = 0;
  for (const auto& [index, id] : items) {
    auto found = active_.find(id);
    Request* request = scheduler_.find(id);
    if (found == active_.end() || request == nullptr) continue;  // finished in this step
    const BatchSequence& sequence = batch.sequences[index];
    const bool guess = verify_next &&
                       std::find(guessing.begin(), guessing.end(), id) != guessing.end();
    jobs.push_back({id, request->tokens, batch.positions[static_cast<size_t>(sequence.first_token)],
                    trunk_hidden_.data() + sequence.first_token * hidden, sequence.num_tokens,
                    guess ? draft_room(*request, *found->second) : 0, &request->draft_tokens});
    if (guess) {
      ++num_guessing;
      acceptance.push_back(found->second->acceptance.value());
    }
  }
  if (jobs.empty()) return;
  const int length =
      num_guessing == 0 ? 0
      : !options_.speculative.adaptive
          ? options_.speculative.max_draft_tokens
          : choose_draft_model_length(step_cost_, mtp_runner_->pass_seconds(num_guessing, step_cost_),
                                      scheduler_.num_running(), acceptance,
                                      options_.speculative.max_draft_tokens);
  if (!mtp_runner_->advance(jobs, length).ok()) {
    // Not expected (the layer's inputs are the engine's own); no guesses this step, and the
    // layer's state for these sequences is rebuilt from where the trunk next computes them.
    for (MtpRunner::Job& job : jobs) {
      job.out->clear();
      mtp_runner_->release(job.id);
    }
  }
}

void EngineCore::size_drafts() {
  if (!options_.speculative.enabled() || !options_.speculative.adaptive) return;
  std::vector<Request*> drafting;
  std::vector<double> acceptance;
  std::vector<int> available;
  int decoding = 0;
  for (const auto& [id, active] : active_) {
    Request* request = scheduler_.find(id);
    if (request == nullptr || request->state != RequestState::kRunning ||
        request->num_uncomputed_tokens() != 1) {
      continue;
    }
    ++decoding;
    if (!active->model_drafts && !request->draft_tokens.empty()) {
      drafting.push_back(request);
      acceptance.push_back(active->acceptance.value());
      available.push_back(static_cast<int>(request->draft_tokens.size()));
    }
  }
  // A step with this many decodes verifies no drafts (the scheduler drops them): no sizing.
  if (decoding > options_.speculative.max_sequences) return;
  const std::vector<int> lengths = choose_draft_lengths(step_cost_, decoding, acceptance, available);
  for (size_t i = 0; i < drafting.size(); ++i) drafting[i]->draft_tokens.resize(lengths[i]);
}

void EngineCore::step() {
  fail_expired();
  size_drafts();
  const auto now = std::chrono::steady_clock::now();
  SchedulerOutput output =
      scheduler_.schedule(std::chrono::duration<double>(now.time_since_epoch()).count());
  if (output.empty()) return;
  publish_metrics(0);  // running/waiting as of this step, before a possibly long forward pass
  for (const ScheduledRequest& item : output.scheduled) {
    Active& active = *active_.at(item.request->id);
    if (active.scheduled) continue;
    active.scheduled = true;
    active.queue_seconds = std::chrono::duration<double>(now - active.submitted).count();
  }
  std::vector<SnapKvJob> snapkv = snapkv_jobs(output);
  auto observe = [&](int layer, const float* queries, int) {
    observe_for_snapkv(snapkv, layer, queries);
  };
  const DecoderModel::AttentionObserver observer = observe;
  const auto run_start = std::chrono::steady_clock::now();
  Status status = runner_.execute(output, snapkv.empty() ? nullptr : &observer,
                                  mtp_runner_ ? &trunk_hidden_ : nullptr);
  step_cost_.observe(output.num_tokens, std::chrono::duration<double>(
                                            std::chrono::steady_clock::now() - run_start)
                                            .count());
  if (!status.ok()) {
    // Not expected (inputs were validated); fail the step's requests rather than the process.
    for (const ScheduledRequest& item : output.scheduled) {
      EngineOutput failed;
      failed.status = Status(StatusCode::kInternal, status.message());
      finish(item.request->id, std::move(failed));
    }
    return;
  }
  // The requests whose hidden states the MTP layer takes in (ids now: a request that finishes
  // in this step is gone after it).
  std::vector<std::pair<size_t, RequestId>> mtp_items;
  if (mtp_runner_) {
    for (size_t i = 0; i < output.scheduled.size(); ++i) {
      const RequestId id = output.scheduled[i].request->id;
      if (active_.at(id)->model_drafts) mtp_items.emplace_back(i, id);
    }
  }
  // Sample first: how many drafts each request keeps decides what the step computed.
  std::vector<Sampled> sampled;
  int logits_row = 0;
  for (ScheduledRequest& item : output.scheduled) {
    if (item.samples_next_token) {
      sampled.push_back(sample(item, *active_.at(item.request->id), logits_row));
    }
  }
  named_blocks_.clear();
  scheduler_.on_step_done(output, disk_store_ ? &named_blocks_ : nullptr);
  if (disk_store_) disk_store_->save(named_blocks_);
  for (SnapKvJob& job : snapkv) {
    if (!job.last) continue;
    // Not for a request that ends with this step.
    const bool finishing = std::any_of(sampled.begin(), sampled.end(), [&](const Sampled& item) {
      return item.id == job.request->id && item.output.finished;
    });
    if (!finishing) {
      compact_for_snapkv(job);
      active_.at(job.request->id)->snapkv.reset();
    }
  }
  int num_generated = 0;
  std::vector<RequestId> model_drafting;
  for (Sampled& result : sampled) {
    num_generated += static_cast<int>(result.output.tokens.size());
    if (result.output.finished) {
      finish(result.id, std::move(result.output));
      continue;
    }
    Active& active = *active_.at(result.id);
    active.stream->push(std::move(result.output));
    if (active.model_drafts) {
      model_drafting.push_back(result.id);
    } else {
      propose(*scheduler_.find(result.id), active);
    }
  }
  if (mtp_runner_) {
    advance_mtp(mtp_items, model_drafting);
  } else {
    propose_with_draft_model(model_drafting);
  }
  publish_metrics(output.num_tokens);
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  metrics_.generation_tokens_total += num_generated;
}

std::vector<EngineCore::SnapKvJob> EngineCore::snapkv_jobs(const SchedulerOutput& output) {
  std::vector<SnapKvJob> jobs;
  if (options_.snapkv_budget <= 0) return jobs;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& item = output.scheduled[i];
    Request* request = item.request;
    // Every known token (the prompt, and what a preempted request had generated) is computed
    // by the step that samples; SnapKV then compacts them once. Not while it decodes: a prompt
    // within the budget stays whole, as in the Generator.
    const int length = request->num_tokens();
    const int end = request->num_computed_tokens + item.num_new_tokens - item.num_draft_tokens;
    const int window_start = length - SnapKvOptions().window;
    const bool decoding = request->num_computed_tokens >= request->num_prompt_tokens &&
                          end - request->num_computed_tokens == 1;
    if (request->compacted || request->sink_tokens != 0 || length <= options_.snapkv_budget ||
        end <= window_start || decoding) {
      continue;
    }
    Active& active = *active_.at(request->id);
    // A chunk that does not follow the last one observed (a preemption recomputes from the
    // start or a cached prefix) starts the scores again.
    if (!active.snapkv || active.snapkv_next != request->num_computed_tokens) {
      active.snapkv = std::make_unique<SnapKvScorer>(
          model_, length, SnapKvOptions{.budget = options_.snapkv_budget});
    }
    active.snapkv_next = end;
    jobs.push_back({i, request, active.snapkv.get(), length, end == length});
  }
  return jobs;
}

void EngineCore::observe_for_snapkv(std::vector<SnapKvJob>& jobs, int layer,
                                    const float* queries) {
  const AttentionShape shape = model_.attention_shape();
  const int block_size = cache_->block_size();
  std::vector<float> by_dimension, values;
  for (SnapKvJob& job : jobs) {
    const BatchSequence& sequence = runner_.batch().sequences[job.item];
    const std::vector<BlockId>& blocks = job.request->blocks;
    // A head's keys of positions [0, count) from the request's blocks, transposed.
    auto read_keys = [&](int kv_head, int count, float* keys_by_dimension) {
      by_dimension.resize(static_cast<size_t>(shape.head_size) * block_size);
      values.resize(static_cast<size_t>(block_size) * shape.head_size);
      for (int first = 0; first < count; first += block_size) {
        const int n = std::min(block_size, count - first);
        cache_->load_block(layer, kv_head, blocks[first / block_size], n, by_dimension.data(),
                           block_size, values.data());
        for (int d = 0; d < shape.head_size; ++d) {
          std::copy_n(by_dimension.data() + static_cast<size_t>(d) * block_size, n,
                      keys_by_dimension + static_cast<size_t>(d) * count + first);
        }
      }
    };
    // (Not the drafts a step verifies after the known tokens.)
    job.scorer->observe(layer, sequence.start_position,
                        queries + static_cast<int64_t>(sequence.first_token) * shape.num_heads *
                                      shape.head_size,
                        std::min(sequence.num_tokens, job.length - sequence.start_position),
                        read_keys);
  }
}

void EngineCore::compact_for_snapkv(SnapKvJob& job) {
  Request* request = job.request;
  if (request->state != RequestState::kRunning) return;  // preempted in this step
  // Blocks shared through the prefix cache stay whole: those it took from it, and any that
  // another request holds too.
  int shared = request->num_reused_tokens / options_.block_size;
  while (shared < static_cast<int>(request->blocks.size()) &&
         block_pool_.reference_count(request->blocks[shared]) > 1) {
    ++shared;
  }
  const int length = request->num_computed_slots();
  const int first = shared * options_.block_size;
  const KeptPositions kept = job.scorer->kept_positions(first);
  const int count = static_cast<int>(kept[0][0].size());
  request->compacted = true;
  if (count >= length) return;
  // Into fresh blocks: the prompt's own blocks go back to the prefix cache unchanged.
  std::optional<Scheduler::CompactionBlocks> blocks =
      scheduler_.blocks_for_compaction(shared, count);
  if (!blocks) return;  // no room to compact now: it runs on with every position
  std::vector<BlockId> to(request->blocks.begin(), request->blocks.begin() + shared);
  to.insert(to.end(), blocks->fresh.begin(), blocks->fresh.end());
  std::vector<BlockId> local_to(blocks->first_local_block, kNoBlock);
  local_to.insert(local_to.end(), blocks->local.begin(), blocks->local.end());
  // A local layer's new blocks hold the slots the next tokens can see, from the window of the
  // slot after the last (the scorer kept that many recent positions after the shared prefix).
  const int local_written = std::max(first, count - model_.config().sliding_window + 1);
  std::vector<std::vector<int>> local_kept;
  for (int layer = 0; layer < static_cast<int>(kept.size()); ++layer) {
    if (!cache_->is_local(layer)) {
      cache_->keep_positions(layer, request->blocks, to, kept[layer], first);
      continue;
    }
    local_kept = kept[layer];
    for (std::vector<int>& positions : local_kept) {
      std::iota(positions.begin(), positions.begin() + local_written, 0);  // not written
    }
    cache_->keep_positions(layer, request->local_blocks, local_to, local_kept, local_written);
  }
  scheduler_.compact(request, shared, std::move(*blocks), count);
  ++snapkv_compactions_;
  snapkv_evicted_ += length - count;
}

void EngineCore::publish_metrics(int step_tokens) {
  if (step_tokens > 0) tokens_per_step_.observe(step_tokens);
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  metrics_.num_running = scheduler_.num_running();
  metrics_.num_waiting = scheduler_.num_waiting();
  metrics_.kv_blocks_used = block_pool_.num_held();
  metrics_.kv_blocks_cached = block_pool_.num_cached();
  if (local_block_pool_) {
    metrics_.kv_local_blocks_used = local_block_pool_->num_held();
    metrics_.kv_local_blocks_cached = local_block_pool_->num_cached();
  }
  metrics_.prefix_cache_queried_tokens_total = scheduler_.counters().prefix_queried_tokens;
  metrics_.prefix_cache_hit_tokens_total = scheduler_.counters().prefix_hit_tokens;
  metrics_.prefix_cache_disk_tokens_total = scheduler_.counters().prefix_source_tokens;
  if (disk_store_) metrics_.kv_disk = disk_store_->tier().counters();
  metrics_.prompt_tokens_total = scheduler_.counters().prefix_queried_tokens;
  metrics_.preemptions_total = scheduler_.counters().preemptions;
  metrics_.snapkv_compactions_total = snapkv_compactions_;
  metrics_.snapkv_evicted_tokens_total = snapkv_evicted_;
  if (step_tokens > 0) ++metrics_.steps_total;
  metrics_.tokens_per_step = tokens_per_step_.snapshot();
}

void EngineCore::run() {
  while (take_inbox()) {
    step();
    publish_metrics(0);
  }
  std::vector<RequestId> unfinished;
  for (const auto& [id, active] : active_) unfinished.push_back(id);
  for (RequestId id : unfinished) {
    EngineOutput output;
    output.status = cancelled("the engine stopped");
    finish(id, std::move(output));
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    for (Submission& submission : submissions_) {
      EngineOutput output;
      output.finished = true;
      output.status = cancelled("the engine stopped");
      submission.stream->push(std::move(output));
    }
    submissions_.clear();
    tasks_.clear();  // dropped: whoever waits on one learns that it will not run
  }
  publish_metrics(0);
}

}  // namespace tachyon
