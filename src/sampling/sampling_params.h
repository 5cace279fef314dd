// What a request asks of the sampler and of stop detection: native values, no JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tachyon {

// Same alias as tokenizer/vocabulary.h (a repeated alias of the same type is legal), so that
// sampling does not depend on the tokenizer.
using TokenId = int32_t;

struct SamplingParams {
  // 0 ⇒ greedy (exact argmax, lowest id on ties). Logits are divided by it otherwise.
  float temperature = 1.0f;
  // Keep only the k most likely tokens (exactly k: ties at the boundary go to lower ids).
  // 0 ⇒ off; a k at or above the vocabulary size is off too.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability sums to >= top_p. 1 ⇒ off.
  float top_p = 1.0f;
  // Keep tokens with probability >= min_p · (probability of the most likely token). 0 ⇒ off.
  float min_p = 0.0f;

  // Hugging Face / llama.cpp repetition penalty over the distinct tokens among the last
  // `penalty_last_n` tokens of prompt + output: positive logits are divided by it, negative
  // ones multiplied. 1 ⇒ off.
  float repetition_penalty = 1.0f;
  // Window of the repetition penalty: -1 ⇒ the whole context (as HF and vLLM), 0 ⇒ nothing.
  int32_t penalty_last_n = -1;
  // OpenAI penalties over generated tokens only (not the prompt), not windowed:
  //   logit -= presence_penalty · [count > 0] + frequency_penalty · count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;

  // Token id → value added to its logit before anything else. In [-100, 100] as OpenAI: -100
  // effectively bans a token, +100 effectively forces it. -infinity is accepted as a hard ban.
  std::map<TokenId, float> logit_bias;

  // Same seed + same logits and context ⇒ same tokens. Unset ⇒ seeded from std::random_device.
  std::optional<uint64_t> seed;

  // Generation stops when the output text contains one of these; the stop string itself and
  // anything after it are not emitted.
  std::vector<std::string> stop;
  // Keep going after end-of-generation tokens (they are then ordinary tokens).
  bool ignore_eos = false;
  // Most tokens to generate; unset ⇒ only the context length limits it (the caller's job).
  std::optional<int32_t> max_tokens;

  // Report the chosen token's logprob, and the `top_logprobs` most likely alternatives.
  bool logprobs = false;
  int32_t top_logprobs = 0;

  static constexpr int32_t kMaxTopLogprobs = 20;
  static constexpr float kMaxLogitBias = 100.0f;
  static constexpr float kMaxOpenAiPenalty = 2.0f;

  bool is_greedy() const { return temperature == 0.0f; }

  // Rejects values the sampler cannot honour, naming the field and the value.
  Status validate(int32_t vocab_size) const;
};

}  // namespace tachyon
