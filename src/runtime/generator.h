// One sequence at a time: prompt in, tokens out, streamed as text. Keeps the KV cache of the
// last sequence so that a follow-up prompt sharing its start (the next turn of a chat) only
// computes what is new. Used by `generate`, `chat` and `bench`; the serving engine batches
// many sequences instead.
#pragma once

#include <atomic>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "kv_cache/kv_cache.h"
#include "models/decoder_model.h"
#include "sampling/sampler.h"
#include "sampling/stop_condition.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

struct GenerationOutput {
  std::vector<TokenId> tokens;  // generated ids, the finishing one included
  std::string text;             // what was streamed, stop strings excluded
  FinishReason finish_reason = FinishReason::kNone;  // kNone when cancelled
  bool cancelled = false;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;   // reused from the previous sequence's cache
  double prompt_seconds = 0;      // computing the prompt (and the first token's logits)
  double generation_seconds = 0;  // the rest
};

class Generator {
 public:
  // `context_size` tokens of KV cache (≤ the model's context length) are allocated up front.
  Generator(DecoderModel& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
            int batch_size = 512, DType cache_type = DType::kF16);

  // Generates after `prompt` until a stop condition, max_tokens, a full context, or `cancel`
  // becomes true. `on_text` receives each piece of final text as soon as it is known.
  Result<GenerationOutput> generate(std::span<const TokenId> prompt, const SamplingParams& params,
                                    const std::function<void(std::string_view)>& on_text,
                                    const std::atomic<bool>* cancel = nullptr);

  // Computes the prompt only (no sampling) and returns the last position's logits.
  Result<std::span<const float>> prefill(std::span<const TokenId> prompt);

  int context_size() const { return cache_.capacity(); }
  // Tokens whose keys and values the cache holds, in order.
  const std::vector<TokenId>& cached_tokens() const { return cached_tokens_; }
  void forget_cache() { cached_tokens_.clear(); }

  // End-of-generation tokens: those the vocabulary names (eos, eot, eom) and control tokens
  // spelled like the usual end markers.
  static std::vector<TokenId> end_of_generation_tokens(const Vocabulary& vocabulary);

 private:
  // Runs tokens[start..] through the model in batches, returning the last token's logits.
  Status extend(std::span<const TokenId> tokens);

  DecoderModel& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  int batch_size_;
  KvCache cache_;
  std::vector<TokenId> cached_tokens_;
  std::vector<float> logits_;  // f32 [vocab] of the last computed token
  std::vector<TokenId> end_of_generation_;
  int last_reused_tokens_ = 0;  // prompt tokens the last prefill took from the cache
};

}  // namespace tachyon
