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
  if (options.snapkv_budget != 0 && config.has_local_layers()) {
    return unsupported(kWindowModelsKeepTheirCache);
  }
  if (options.snapkv_budget != 0 && (options.snapkv_budget < 64 || config.mla.enabled())) {
    return invalid_argument(
        config.mla.enabled()
            ? "SnapKV is not built for MLA models (their cache is one latent per token)"
            : fmt::format("SnapKV budget {} is below 64 tokens", options.snapkv_budget));
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
  const int64_t num_blocks = std::min<int64_t>(kv_bytes / static_cast<int64_t>(block_bytes),
                                               1 << 24);
  if (num_blocks < 1) {
    return out_of_range(fmt::format(
        "KV cache memory of {} bytes holds no block ({} bytes for {} tokens)", kv_bytes,
        block_bytes, options.block_size));
  }
  TACHYON_ASSIGN_OR_RETURN(
      std::unique_ptr<PagedKvCache> cache,
      PagedKvCache::create(config.num_layers, config.num_kv_heads, config.head_size,
                           static_cast<int>(num_blocks), options.block_size,
                           options.kv_cache_type, config.kv_values_are_keys()));
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
  std::unique_ptr<KvDiskTier> disk_tier;
  if (!options.kv_disk_directory.empty()) {
    if (!options.enable_prefix_cache) {
      return invalid_argument("the KV disk tier keeps prefix-cache blocks: it needs the prefix cache on");
    }
    if (options.model_fingerprint == Sha256Digest{}) {
      return invalid_argument("the KV disk tier needs the model's fingerprint (EngineOptions)");
    }
    // Everything the bytes of a block depend on besides its tokens.
    const std::string layout = fmt::format(
        "tachyon kv disk v1; type {}; block {} tokens, {} bytes; {} layers; kv size {}; head {}; "
        "values are keys {}",
        kv_cache_type_name(options.kv_cache_type), options.block_size, block_bytes,
        config.num_layers, config.kv_size(), config.head_size, config.kv_values_are_keys());
    const Sha256Digest key =
        sha256({std::span<const uint8_t>(options.model_fingerprint), as_bytes(layout)});
    TACHYON_ASSIGN_OR_RETURN(disk_tier,
                             KvDiskTier::open(options.kv_disk_directory, options.kv_disk_bytes,
                                              key, options.block_size, block_bytes));
  }
  std::unique_ptr<Engine> engine(new Engine());
  engine->core_ = std::make_unique<EngineCore>(model, tokenizer, pool, options, std::move(cache),
                                               max_context, std::move(draft_runner),
                                               std::move(disk_tier));
  engine->thread_ = std::thread([core = engine->core_.get()] { core->run(); });
  return engine;
}

Engine::~Engine() {
  if (core_) core_->stop();
  if (thread_.joinable()) thread_.join();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(EngineRequest request,
                                                      std::function<void()> notify) {
  return core_->submit(std::move(request), std::move(notify));
}

void Engine::cancel(RequestId id) { core_->cancel(id); }
int Engine::max_context() const { return core_->max_context(); }
EngineMetrics Engine::metrics() const { return core_->metrics(); }
const EngineOptions& Engine::options() const { return core_->options(); }

}  // namespace tachyon
