#include "sampling/sampling_params.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace tachyon {

Status SamplingParams::validate(int32_t vocab_size) const {
  // `!(x >= lo)` rather than `x < lo` so NaN fails too.
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return invalid_argument(
        fmt::format("temperature must be a finite number >= 0, got {}", temperature));
  }
  if (top_k < 0) {
    return invalid_argument(fmt::format("top_k must be >= 0 (0 = off), got {}", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return invalid_argument(fmt::format("top_p must be in (0, 1], got {}", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return invalid_argument(fmt::format("min_p must be in [0, 1], got {}", min_p));
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return invalid_argument(
        fmt::format("repetition_penalty must be a finite number > 0, got {}", repetition_penalty));
  }
  if (penalty_last_n < -1) {
    return invalid_argument(fmt::format(
        "penalty_last_n must be >= -1 (-1 = whole context, 0 = off), got {}", penalty_last_n));
  }
  if (!(std::fabs(presence_penalty) <= kMaxOpenAiPenalty)) {
    return invalid_argument(
        fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  if (!(std::fabs(frequency_penalty) <= kMaxOpenAiPenalty)) {
    return invalid_argument(
        fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument(fmt::format(
          "logit_bias token id {} is out of range for a vocabulary of {} tokens", id, vocab_size));
    }
    const bool hard_ban = bias == -std::numeric_limits<float>::infinity();
    if (!hard_ban && !(std::fabs(bias) <= kMaxLogitBias)) {
      return invalid_argument(
          fmt::format("logit_bias for token {} must be in [-100, 100], got {}", id, bias));
    }
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return invalid_argument(fmt::format("stop[{}] must not be empty", i));
  }
  if (max_tokens && *max_tokens < 1) {
    return invalid_argument(fmt::format("max_tokens must be >= 1, got {}", *max_tokens));
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return invalid_argument(
        fmt::format("top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs, top_logprobs));
  }
  if (top_logprobs > 0 && !logprobs) {
    return invalid_argument(
        fmt::format("top_logprobs is {} but logprobs is not enabled", top_logprobs));
  }
  return Status::ok_status();
}

}  // namespace tachyon
