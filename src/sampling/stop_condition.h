// Streaming stop detection: decides, token by token, which text is safe to send to the client
// and when generation is over.
//
// Text that could still turn out to be the start of a stop string is held back until the next
// pieces settle it. When a stop string completes, the text before it is emitted and the stop
// string and anything after it are dropped. Among several stop strings the one that completes
// first in the character stream wins (then the longest, i.e. the one starting earliest), so the
// output never depends on how the text happened to be split into tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampling_params.h"

namespace tachyon {

enum class FinishReason {
  kNone,    // still generating
  kStop,    // an end-of-generation token or a stop string
  kLength,  // max_tokens reached
};

// OpenAI's spelling: "stop", "length"; "" for kNone.
const char* finish_reason_name(FinishReason reason);

struct StopUpdate {
  std::string text;  // safe to emit now; may be empty
  FinishReason finish_reason = FinishReason::kNone;

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

class StopCondition {
 public:
  // `eos_token_ids`: end-of-generation tokens (EOS/EOT/EOM); ignored when `ignore_eos`.
  // Empty stop strings are ignored. `max_tokens` unset ⇒ no length limit here.
  StopCondition(std::vector<TokenId> eos_token_ids, std::vector<std::string> stop_strings,
                std::optional<int32_t> max_tokens, bool ignore_eos = false);
  // Takes stop, ignore_eos and max_tokens from the request.
  StopCondition(const SamplingParams& params, std::vector<TokenId> eos_token_ids);

  // One generated token and the text it decoded to (the streaming detokenizer's output, which
  // may be empty). An end-of-generation token's own text is never emitted. When this returns
  // finished, `text` includes everything still held back (except a matched stop string), and
  // later calls return nothing.
  StopUpdate push(TokenId token, std::string_view piece);

  // Releases held-back text when generation ends for a reason this class does not see (cancel,
  // context full). Empty after a finishing push.
  std::string flush();

  bool finished() const { return finish_reason_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return finish_reason_; }
  // What triggered kStop: the stop string, or the end-of-generation token.
  const std::optional<std::string>& matched_stop_string() const { return matched_string_; }
  std::optional<TokenId> matched_stop_token() const { return matched_token_; }
  // Tokens pushed so far, the finishing one included.
  size_t num_tokens() const { return num_tokens_; }
  // Bytes currently held back.
  size_t num_held_bytes() const { return pending_.size(); }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t held_suffix_length() const;

  std::vector<TokenId> eos_token_ids_;
  std::vector<std::string> stop_strings_;
  std::optional<size_t> max_tokens_;
  bool ignore_eos_;

  std::string pending_;  // received but not yet emitted
  size_t num_tokens_ = 0;
  FinishReason finish_reason_ = FinishReason::kNone;
  std::optional<std::string> matched_string_;
  std::optional<TokenId> matched_token_;
};

}  // namespace tachyon
