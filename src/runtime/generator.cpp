#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/engine_options.h"
#include "speculative/acceptance_rate.h"
#include "speculative/lookup_proposer.h"
#include "tokenizer/streaming_detokenizer.h"

namespace tachyon {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Generator::Generator(DecoderModel& model, const Tokenizer& tokenizer, ThreadPool& pool,
                     int context_size, int batch_size, DType cache_type)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(pool),
      batch_size_(std::max(1, batch_size)),
      cache_(model.make_cache(context_size, cache_type)),
      end_of_generation_(end_of_generation_tokens(tokenizer.vocabulary())) {}

std::vector<TokenId> Generator::end_of_generation_tokens(const Vocabulary& vocabulary) {
  std::vector<TokenId> ids;
  for (const std::optional<TokenId>& id : {vocabulary.eos_id, vocabulary.eot_id, vocabulary.eom_id}) {
    if (id) ids.push_back(*id);
  }
  static const char* const kEndMarkers[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                            "<|eom_id|>",    "<|end|>",    "<end_of_turn>",
                                            "</s>",          "<|end_of_text|>"};
  for (const char* marker : kEndMarkers) {
    std::optional<TokenId> id = vocabulary.find(marker);
    if (id && vocabulary.types[*id] == TokenType::kControl) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Status Generator::set_speculation(const SpeculativeOptions& options, DraftModelRunner* draft) {
  if (options.enabled() && options.mode == SpeculativeMode::kDraft && draft == nullptr) {
    return invalid_argument("speculative mode 'draft' needs a draft model (--draft-model FILE)");
  }
  mtp_.reset();
  if (options.enabled() && options.mode == SpeculativeMode::kMtp) {
    constexpr int kBlock = 16;
    TACHYON_ASSIGN_OR_RETURN(mtp_, MtpRunner::create(model_, pool_,
                                                     (context_size() + 2 * kBlock) / kBlock + 1,
                                                     kBlock, cache_.type()));
  }
  speculation_ = options;
  draft_ = options.mode == SpeculativeMode::kDraft ? draft : nullptr;
  suffix_cache_.reset();
  if (options.enabled() && options.mode == SpeculativeMode::kSuffix) {
    suffix_cache_ = std::make_unique<SuffixCache>(options.suffix_cache_tokens);
  }
  return Status();
}

Status Generator::extend(std::span<const TokenId> tokens, int num_logits, SnapKvScorer* scorer) {
  size_t start = cached_tokens_.size();
  // The MTP layer's input (not with the sink policy or SnapKV: positions would not follow).
  const bool take_hidden = mtp_ && !sink_ && position_offset_ == 0;
  std::vector<float> chunk_hidden;
  while (start < tokens.size()) {
    const size_t count = std::min<size_t>(batch_size_, tokens.size() - start);
    const bool last = start + count == tokens.size();
    const int cache_position = static_cast<int>(start) - position_offset_;
    auto observe = [&](int layer, const float* queries, int num_tokens) {
      scorer->observe(cache_, cache_position, layer, queries, num_tokens);
    };
    const DecoderModel::AttentionObserver observer = observe;
    Status status = model_.forward(tokens.subspan(start, count), cache_position, cache_, pool_,
                                   last ? std::min<int>(num_logits, count) : 1, logits_,
                                   position_offset_, scorer != nullptr ? &observer : nullptr,
                                   take_hidden ? &chunk_hidden : nullptr);
    if (!status.ok()) {
      cached_tokens_.resize(start);
      return status;
    }
    if (take_hidden) {
      // The MTP layer reads these when it next runs (rows of guesses it rejects are ignored).
      if (mtp_hidden_.empty()) mtp_first_ = static_cast<int>(start);
      mtp_hidden_.insert(mtp_hidden_.end(), chunk_hidden.begin(), chunk_hidden.end());
    }
    cached_tokens_.insert(cached_tokens_.end(), tokens.begin() + start,
                          tokens.begin() + start + count);
    start += count;
  }
  return Status();
}

Result<std::span<const float>> Generator::prefill(std::span<const TokenId> prompt) {
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  if (static_cast<int>(prompt.size()) >= context_size()) {
    return out_of_range(fmt::format("prompt has {} tokens, context is {}", prompt.size(),
                                    context_size()));
  }
  // A cache SnapKV compacted no longer holds the tokens before it position by position.
  if (position_offset_ != 0) {
    cached_tokens_.clear();
    position_offset_ = 0;
  }
  // Reuse the longest common prefix, but always recompute the last prompt token: its logits
  // are what the first sampled token comes from.
  size_t reuse = 0;
  const size_t limit = std::min(cached_tokens_.size(), prompt.size() - 1);
  while (reuse < limit && cached_tokens_[reuse] == prompt[reuse]) ++reuse;
  cached_tokens_.resize(reuse);
  last_reused_tokens_ = static_cast<int>(reuse);
  TACHYON_RETURN_IF_ERROR(extend(prompt));
  return std::span<const float>(logits_);
}

void Generator::drop_for_sink(std::vector<TokenId>& view, int& dropped) {
  const int chunk = std::min(sink_drop_chunk(),
                             static_cast<int>(cached_tokens_.size()) - kSinkTokens);
  cache_.drop_positions(kSinkTokens, chunk, static_cast<int>(cached_tokens_.size()),
                        [&](float* keys, int n, int layer) {
                          model_.shift_keys(keys, n, chunk, layer);
                        });
  cached_tokens_.erase(cached_tokens_.begin() + kSinkTokens,
                       cached_tokens_.begin() + kSinkTokens + chunk);
  view.erase(view.begin() + kSinkTokens, view.begin() + kSinkTokens + chunk);
  dropped += chunk;
}

Status Generator::check_cache_policies() const {
  if ((sink_ || snapkv_budget_ > 0) && model_.shard().distributed()) {
    // Both move or drop cached positions outside the forward passes every rank runs.
    return unsupported("the sink context-overflow policy and SnapKV run in one process (not "
                       "with --tp or --pp yet)");
  }
  if (snapkv_budget_ > 0) return check_snapkv_budget(model_.config(), snapkv_budget_);
  return Status();
}

Result<GenerationOutput> Generator::generate(std::span<const TokenId> prompt,
                                             const SamplingParams& params,
                                             const std::function<void(std::string_view)>& on_text,
                                             const std::atomic<bool>* cancel,
                                             TokenConstraint* constraint) {
  TACHYON_RETURN_IF_ERROR(check_cache_policies());
  TACHYON_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(params, tokenizer_.vocabulary_size()));
  if (mtp_) {
    // Its entries were built from the last sequence's tokens: it starts over with this one.
    mtp_->release(0);
    mtp_hidden_.clear();
  }
  GenerationOutput output;
  output.prompt_tokens = static_cast<int>(prompt.size());
  const auto prompt_start = std::chrono::steady_clock::now();
  // With sink: what the cache holds (the cut prompt, then each token as it is computed).
  std::vector<TokenId> view;
  if (sink_) {
    const int keep = context_size() - sink_drop_chunk();
    if (static_cast<int>(prompt.size()) > keep) {  // the sink tokens, then the last ones
      output.dropped_tokens = static_cast<int>(prompt.size()) - keep;
      view.assign(prompt.begin(), prompt.begin() + kSinkTokens);
      view.insert(view.end(), prompt.end() - (keep - kSinkTokens), prompt.end());
    } else {
      view.assign(prompt.begin(), prompt.end());
    }
  }
  const int length = static_cast<int>(prompt.size());
  if (!sink_ && snapkv_budget_ > 0 && length > snapkv_budget_ && length < context_size() &&
      !model_.config().mla.enabled()) {
    // SnapKV: the whole prompt computed (nothing reused: every window token is observed), then
    // each KV head compacted to the budget; later tokens run at an offset.
    cached_tokens_.clear();
    position_offset_ = 0;
    last_reused_tokens_ = 0;
    SnapKvScorer scorer(model_, length, {.budget = snapkv_budget_});
    TACHYON_RETURN_IF_ERROR(extend(prompt, 1, &scorer));
    compact_cache(cache_, scorer.kept_positions());
    position_offset_ = length - snapkv_budget_;
    output.dropped_tokens = position_offset_;
  } else {
    TACHYON_RETURN_IF_ERROR(prefill(sink_ ? std::span<const TokenId>(view) : prompt).status());
  }
  output.cached_prompt_tokens = last_reused_tokens_;
  output.prompt_seconds = seconds_since(prompt_start);

  const auto generation_start = std::chrono::steady_clock::now();
  StopCondition stop(params, end_of_generation_);
  StreamingDetokenizer detokenizer(tokenizer_, /*skip_special=*/true);
  std::vector<TokenId> context(prompt.begin(), prompt.end());
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    output.text += text;
    on_text(text);
  };
  // Speculation: drafts[i] is the guess for the token after logits_ row i; rows past the
  // first are valid only while the samples equal the guesses before them.
  std::unique_ptr<LookupProposer> proposer;
  if (speculation_.enabled() && draft_ == nullptr && !mtp_ && !sink_) {
    proposer = std::make_unique<LookupProposer>(speculation_.max_draft_tokens,
                                                suffix_cache_.get(), /*partition=*/0);
  }
  AcceptanceRate acceptance;
  std::vector<TokenId> drafts;
  int row = 0;
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  while (true) {
    if (cancel && cancel->load()) {
      emit(stop.flush());
      output.cancelled = true;
      break;
    }
    const TokenId token = sampler.sample(std::span<float>(logits_.data() + row * vocab, vocab),
                                         context, prompt.size(), constraint);
    if (sampler.constraint_failed()) {
      return Status(StatusCode::kInternal, "the output's grammar allows no token at this point");
    }
    context.push_back(token);
    output.tokens.push_back(token);
    TACHYON_ASSIGN_OR_RETURN(std::string piece, detokenizer.push(token));
    StopUpdate update = stop.push(token, piece);
    emit(update.text);
    if (update.finished()) {
      output.finish_reason = update.finish_reason;
      break;
    }
    if (constraint != nullptr && constraint->is_terminated()) {
      emit(stop.flush());  // an end-of-generation token went through with ignore_eos
      output.finish_reason = FinishReason::kStop;
      break;
    }
    if (constraint != nullptr) constraint->prepare_mask();
    if (!sink_ && static_cast<int>(context.size()) - position_offset_ >= context_size()) {
      // No room to compute another token: the context is full.
      emit(stop.flush());
      output.finish_reason = FinishReason::kLength;
      break;
    }
    if (row < static_cast<int>(drafts.size()) && token == drafts[row]) {
      ++row;  // the guess was right: the next row's logits follow exactly this context
      continue;
    }
    if (!drafts.empty()) {
      ++output.drafts;
      output.draft_tokens += static_cast<int>(drafts.size());
      output.accepted_draft_tokens += row;
      acceptance.observe(static_cast<int>(drafts.size()), row);
    }
    if (sink_) {
      // The token just sampled goes into the cache; when the cache is full, older ones leave.
      view.push_back(token);
      if (static_cast<int>(view.size()) > context_size()) drop_for_sink(view, output.dropped_tokens);
      TACHYON_RETURN_IF_ERROR(extend(view));
      continue;
    }
    // Positions past the last sampled token held rejected guesses.
    cached_tokens_.resize(context.size() - 1);
    drafts.clear();
    row = 0;
    // Guesses must fit the cache, one batch, and max_tokens (the last token is sampled).
    int room = std::min(context_size() + position_offset_ - static_cast<int>(context.size()),
                        batch_size_ - 1);
    if (params.max_tokens) {
      room = std::min(room, *params.max_tokens - static_cast<int>(output.tokens.size()) - 1);
    }
    if (proposer) {
      proposer->propose(context, room, drafts);
      if (speculation_.adaptive) {
        drafts.resize(choose_draft_lengths(step_cost_, 1, {acceptance.value()},
                                           {static_cast<int>(drafts.size())})[0]);
      }
    } else if (mtp_ && (sink_ || position_offset_ != 0)) {
      mtp_hidden_.clear();  // its positions would not follow the cache's
    } else if (mtp_) {
      const int length =
          !speculation_.adaptive
              ? speculation_.max_draft_tokens
              : choose_draft_model_length(step_cost_, mtp_->pass_seconds(1, step_cost_), 1,
                                          {acceptance.value()}, speculation_.max_draft_tokens);
      const int64_t width = model_.config().hidden_size;
      std::vector<MtpRunner::Job> jobs = {
          {0, context, mtp_first_, mtp_hidden_.data(),
           static_cast<int>(mtp_hidden_.size() / static_cast<size_t>(width)),
           length > 0 ? room : 0, &drafts}};
      if (!mtp_hidden_.empty()) TACHYON_RETURN_IF_ERROR(mtp_->advance(jobs, length));
      mtp_hidden_.clear();
    } else if (draft_ != nullptr && room > 0 && !sink_) {
      const int length =
          !speculation_.adaptive
              ? speculation_.max_draft_tokens
              : choose_draft_model_length(step_cost_, draft_->pass_seconds(1, step_cost_), 1,
                                          {acceptance.value()}, speculation_.max_draft_tokens);
      std::vector<DraftModelRunner::Job> jobs = {{0, context, room, &drafts}};
      if (length > 0) TACHYON_RETURN_IF_ERROR(draft_->propose(jobs, length));
    }
    std::vector<TokenId> verified;
    if (!drafts.empty()) {
      verified = context;
      verified.insert(verified.end(), drafts.begin(), drafts.end());
    }
    const auto step_start = std::chrono::steady_clock::now();
    TACHYON_RETURN_IF_ERROR(
        extend(drafts.empty() ? context : verified, 1 + static_cast<int>(drafts.size())));
    step_cost_.observe(1 + static_cast<int>(drafts.size()), seconds_since(step_start));
  }
  if (!drafts.empty()) {  // it ended inside a draft: the rest of it counts as rejected
    ++output.drafts;
    output.draft_tokens += static_cast<int>(drafts.size());
    output.accepted_draft_tokens += row;
  }
  // Everything sampled is final, but the cache may hold keys of guesses after it.
  cached_tokens_.resize(std::min(cached_tokens_.size(), context.size() - 1));
  if (suffix_cache_) suffix_cache_->add(0, context);
  output.generation_seconds = seconds_since(generation_start);
  return output;
}

}  // namespace tachyon
