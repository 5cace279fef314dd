#include "runtime/engine.h"

#include <algorithm>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "kv_cache/kv_cache_type.h"
#include "runtime/engine_core.h"

namespace tachyon {
namespace {

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

}  // namespace

namespace {

// The local layers' pool of a model with sliding-window layers: every running request's window
// (the positions its next tokens see: the window plus a step's tokens, in blocks, and the first
// block a sink request keeps) and as much again for the windows of cached prefixes, but no
// more than the share of the memory these layers would take without windows, and never less
// than one request's window. When every layer is local (Mistral) the other pool holds no
// layer: its blocks only name positions (for block tables and the prefix cache).
struct LocalPoolSize {
  int layers = 0;     // local layers in the pool (0: no local pool)
  int blocks = 0;
  int64_t bytes = 0;  // of the whole pool
};

LocalPoolSize local_pool_size(const ModelConfig& config, const EngineOptions& options,
                              int64_t kv_bytes) {
  LocalPoolSize local;
  for (int layer = 0; layer < config.num_layers; ++layer) local.layers += config.layer_is_local(layer);
  if (local.layers == 0) return LocalPoolSize();
  const int64_t block_bytes = static_cast<int64_t>(
      PagedKvCache::block_bytes(local.layers, config.kv_size(), options.block_size,
                                options.kv_cache_type, config.kv_values_are_keys()));
  const int64_t per_request =
      (config.sliding_window - 1 + options.max_batch_tokens + options.block_size - 1) /
          options.block_size + 2;
  const int64_t wanted = 2 * per_request * options.max_running_requests;
  const int64_t share = kv_bytes / config.num_layers * local.layers / block_bytes;
  local.blocks = static_cast<int>(std::clamp<int64_t>(std::min(wanted, share), per_request, 1 << 24));
  local.bytes = local.blocks * block_bytes;
  return local;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(DecoderModel& model, const Tokenizer& tokenizer,
                                               ThreadPool& pool, EngineOptions options,
                                               DraftModelRef draft) {
  const ModelConfig& config = model.config();
  if (options.block_size <= 0 || options.block_size > 256) {
    return invalid_argument(fmt::format("block size {} is not in 1..256", options.block_size));
  }
  if (options.max_batch_tokens <= 0 || options.max_running_requests <= 0 ||
      options.max_waiting_requests < 0) {
    return invalid_argument("the batch token budget and running-request limit must be positive");
  }
  const SpeculativeOptions& speculative = options.speculative;
  if (speculative.max_draft_tokens < 0 || speculative.max_draft_tokens > 64 ||
      speculative.max_sequences < 0 || speculative.suffix_cache_tokens < 0) {
    return invalid_argument(fmt::format(
        "speculative draft tokens {} is not in 0..64 (or a negative sequence or cache limit)",
        speculative.max_draft_tokens));
  }
  if (model.shard().distributed() &&
      (options.snapkv_budget != 0 || !options.kv_disk_directory.empty() ||
       (speculative.enabled() && speculative.mode == SpeculativeMode::kMtp))) {
    // SnapKV and the disk tier rewrite the cache outside the forward passes every rank runs;
    // the MTP layers are not split.
    return unsupported("SnapKV eviction, the KV disk tier and MTP speculation run in one process "
                       "(not with --tp or --pp yet)");
  }
  if (options.snapkv_budget != 0) {
    TACHYON_RETURN_IF_ERROR(check_snapkv_budget(config, options.snapkv_budget));
  }
  // Before any size is computed for it: a type the heads do not fit is an error, not a CHECK.
  TACHYON_RETURN_IF_ERROR(check_kv_cache_type(options.kv_cache_type, config.head_size));
  int64_t kv_bytes = options.kv_cache_bytes;
  if (kv_bytes <= 0) {
    if (options.kv_cache_fraction <= 0 || options.kv_cache_fraction > 1) {
      return invalid_argument(
          fmt::format("KV cache fraction {} is not in (0, 1]", options.kv_cache_fraction));
    }
    kv_bytes = static_cast<int64_t>(static_cast<double>(available_memory_bytes()) *
                                    options.kv_cache_fraction);
  }
  const size_t block_bytes =
      PagedKvCache::block_bytes(config.num_layers, config.kv_size(), options.block_size,
                                options.kv_cache_type, config.kv_values_are_keys());
  // Models that mix local (sliding-window) and global layers keep the local layers in a pool of
  // their own, where a request holds only the blocks its window covers (LocalPoolSize).
  const LocalPoolSize local = local_pool_size(config, options, kv_bytes);
  const int64_t global_block_bytes =
      static_cast<int64_t>(block_bytes) / config.num_layers * (config.num_layers - local.layers);
  // All layers local: blocks without bytes, as many as every running request's whole context
  // twice over (or what the memory would hold without windows, if more). A draft model's cache
  // has a block for each of them, with bytes: then only the latter.
  const bool draft_model =
      options.speculative.enabled() && options.speculative.mode == SpeculativeMode::kDraft;
  const int64_t without_windows = kv_bytes / static_cast<int64_t>(block_bytes);
  const int64_t num_blocks =
      global_block_bytes > 0
          ? std::min<int64_t>((kv_bytes - local.bytes) / global_block_bytes, 1 << 24)
          : std::min<int64_t>(
                draft_model ? without_windows
                            : std::max<int64_t>(without_windows,
                                                2LL * options.max_running_requests *
                                                    ((config.context_length +
                                                      options.block_size - 1) /
                                                     options.block_size)),
                1 << 24);
  if (num_blocks < 1) {
    return out_of_range(fmt::format(
        "KV cache memory of {} bytes holds no block ({} bytes for {} tokens)", kv_bytes,
        block_bytes, options.block_size));
  }
  TACHYON_ASSIGN_OR_RETURN(
      std::unique_ptr<PagedKvCache> cache,
      model.make_paged_cache(static_cast<int>(num_blocks), options.block_size,
                             options.kv_cache_type, local.layers > 0 ? local.blocks : 0));
  // A request alone must always fit, so that preemption can always make room.
  int max_context = options.max_context > 0 ? std::min(options.max_context, config.context_length)
                                            : config.context_length;
  max_context = static_cast<int>(std::min<int64_t>(max_context, num_blocks * options.block_size));
  if (max_context < 2) return out_of_range("the KV cache holds fewer than 2 tokens");

  std::unique_ptr<DraftModelRunner> draft_runner;
  if (options.speculative.enabled() && options.speculative.mode == SpeculativeMode::kDraft) {
    if (draft.model == nullptr || draft.tokenizer == nullptr) {
      return invalid_argument("speculative mode 'draft' needs a draft model (--draft-model FILE)");
    }
    TACHYON_ASSIGN_OR_RETURN(
        draft_runner,
        DraftModelRunner::create(*draft.model, *draft.tokenizer, model, tokenizer, pool,
                                 static_cast<int>(num_blocks), options.block_size,
                                 options.kv_cache_type));
  }
  std::unique_ptr<MtpRunner> mtp_runner;
  if (options.speculative.enabled() && options.speculative.mode == SpeculativeMode::kMtp) {
    TACHYON_ASSIGN_OR_RETURN(mtp_runner,
                             MtpRunner::create(model, pool, static_cast<int>(num_blocks),
                                               options.block_size, options.kv_cache_type));
  }
  std::unique_ptr<KvDiskTier> disk_tier;
  if (!options.kv_disk_directory.empty()) {
    if (!options.enable_prefix_cache) {
      return invalid_argument("the KV disk tier keeps prefix-cache blocks: it needs the prefix cache on");
    }
    if (options.model_fingerprint == Sha256Digest{}) {
      return invalid_argument("the KV disk tier needs the model's fingerprint (EngineOptions)");
    }
    // Everything the bytes of a block depend on besides its tokens.
    std::string layout = fmt::format(
        "tachyon kv disk v1; type {}; block {} tokens, {} bytes; {} layers; kv size {}; head {}; "
        "values are keys {}",
        kv_cache_type_name(options.kv_cache_type), options.block_size, block_bytes,
        config.num_layers, config.kv_size(), config.head_size, config.kv_values_are_keys());
    // With a local pool a file holds the global layers' bytes, then the local layers'.
    if (local.layers > 0) layout += fmt::format("; {} local layers last", local.layers);
    const Sha256Digest key =
        sha256({std::span<const uint8_t>(options.model_fingerprint), as_bytes(layout)});
    TACHYON_ASSIGN_OR_RETURN(disk_tier,
                             KvDiskTier::open(options.kv_disk_directory, options.kv_disk_bytes,
                                              key, options.block_size, block_bytes));
  }
  std::unique_ptr<Engine> engine(new Engine());
  engine->core_ = std::make_unique<EngineCore>(model, tokenizer, pool, options, std::move(cache),
                                               max_context, std::move(draft_runner),
                                               std::move(disk_tier), std::move(mtp_runner));
  engine->thread_ = std::thread([core = engine->core_.get(), done = &engine->thread_done_] {
    core->run();
    done->store(true);
  });
  return engine;
}

Engine::~Engine() {
  if (core_) core_->stop();
  if (thread_.joinable()) thread_.join();
}

namespace {

// The finishing event of a request ended from outside the engine thread.
EngineOutput failed_output(const Status& reason) {
  EngineOutput failed;
  failed.finished = true;
  failed.status = reason;
  return failed;
}

}  // namespace

Result<std::shared_ptr<RequestStream>> Engine::submit(EngineRequest request,
                                                      std::function<void()> notify) {
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    if (abandoned_) return Status(StatusCode::kUnavailable, abandoned_->message());
  }
  Result<std::shared_ptr<RequestStream>> stream =
      core_->submit(std::move(request), std::move(notify));
  if (!stream.ok()) return stream;
  std::lock_guard<std::mutex> lock(streams_mutex_);
  if (abandoned_) {  // abandon() ran meanwhile
    (*stream)->push(failed_output(*abandoned_));
    return stream;
  }
  if (streams_.size() >= prune_at_) {
    std::erase_if(streams_, [](const std::weak_ptr<RequestStream>& s) { return s.expired(); });
    prune_at_ = std::max<size_t>(64, 2 * streams_.size());
  }
  streams_.push_back(*stream);
  return stream;
}

void Engine::abandon(const Status& reason) {
  std::vector<std::shared_ptr<RequestStream>> live;
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    if (abandoned_) return;
    abandoned_ = reason;
    for (const std::weak_ptr<RequestStream>& weak : streams_) {
      if (std::shared_ptr<RequestStream> stream = weak.lock()) live.push_back(std::move(stream));
    }
    streams_.clear();
  }
  // Streams that have finished drop it.
  for (const std::shared_ptr<RequestStream>& stream : live) stream->push(failed_output(reason));
}

bool Engine::stop_within(std::chrono::milliseconds limit) {
  if (!thread_.joinable()) return true;
  core_->stop();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!thread_done_.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  thread_.join();
  return true;
}

void Engine::cancel(RequestId id) { core_->cancel(id); }

void Engine::run_between_steps(std::function<void(DecoderModel&)> task) {
  core_->run_between_steps(std::move(task));
}
int Engine::max_context() const { return core_->max_context(); }
EngineMetrics Engine::metrics() const { return core_->metrics(); }
const EngineOptions& Engine::options() const { return core_->options(); }

}  // namespace tachyon
