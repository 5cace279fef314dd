#include "sampling/stop_condition.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace tachyon {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

StopCondition::StopCondition(std::vector<TokenId> eos_token_ids,
                             std::vector<std::string> stop_strings,
                             std::optional<int32_t> max_tokens, bool ignore_eos)
    : eos_token_ids_(std::move(eos_token_ids)),
      stop_strings_(std::move(stop_strings)),
      ignore_eos_(ignore_eos) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
  if (max_tokens) {
    TACHYON_CHECK(*max_tokens >= 1);
    max_tokens_ = static_cast<size_t>(*max_tokens);
  }
}

StopCondition::StopCondition(const SamplingParams& params, std::vector<TokenId> eos_token_ids)
    : StopCondition(std::move(eos_token_ids), params.stop, params.max_tokens, params.ignore_eos) {}

size_t StopCondition::held_suffix_length() const {
  size_t held = 0;
  for (const std::string& stop : stop_strings_) {
    // Only suffixes longer than what is already held can raise the answer.
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > held; --length) {
      if (std::string_view(pending_).substr(pending_.size() - length) ==
          std::string_view(stop).substr(0, length)) {
        held = length;
        break;
      }
    }
  }
  return held;
}

StopUpdate StopCondition::push(TokenId token, std::string_view piece) {
  StopUpdate update;
  if (finished()) {
    update.finish_reason = finish_reason_;
    return update;
  }
  ++num_tokens_;

  if (!ignore_eos_ &&
      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end()) {
    // Held-back text was only a possible stop-string start; it never completed, so it is text.
    update.text = std::move(pending_);
    pending_.clear();
    finish_reason_ = update.finish_reason = FinishReason::kStop;
    matched_token_ = token;
    return update;
  }

  pending_.append(piece);
  // The stop string that completes first; pending_ held no complete one before this piece.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stop_strings_) {
    const size_t start = pending_.find(stop);
    if (start == std::string::npos) continue;
    const size_t end = start + stop.size();
    if (best == nullptr || end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
      best = &stop;
    }
  }
  if (best != nullptr) {
    update.text = pending_.substr(0, best_start);
    pending_.clear();
    finish_reason_ = update.finish_reason = FinishReason::kStop;
    matched_string_ = *best;
    return update;
  }

  if (max_tokens_ && num_tokens_ >= *max_tokens_) {
    update.text = std::move(pending_);
    pending_.clear();
    finish_reason_ = update.finish_reason = FinishReason::kLength;
    return update;
  }

  // Stop strings are valid UTF-8, so a held suffix equal to a prefix of one starts on a
  // character boundary and the emitted part stays whole characters.
  const size_t emit = pending_.size() - held_suffix_length();
  update.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return update;
}

std::string StopCondition::flush() {
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

}  // namespace tachyon
