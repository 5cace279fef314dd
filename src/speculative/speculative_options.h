// How the engine and the single-sequence generator speculate: which proposer guesses the next
// tokens, and how many at most. Verification never changes an output (see README.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tachyon {

enum class SpeculativeMode {
  kOff,
  kNgram,   // prompt lookup in the request's own prompt and output
  kSuffix,  // prompt lookup, then a shared cache of recent requests (per tenant)
  kDraft,   // a draft model's greedy guesses (the engine or Generator is given the model)
  kMtp,     // the model's own multi-token prediction layer (DeepSeek-V3's NextN)
};

// Where an accepted or rejected draft came from (metrics are kept per source).
enum class DraftSource { kNgram = 0, kSuffix = 1, kDraft = 2, kMtp = 3 };
inline constexpr int kNumDraftSources = 4;
const char* draft_source_name(DraftSource source);

struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::kOff;
  // Most tokens proposed for one sequence in one step.
  int max_draft_tokens = 8;
  // Steps with more sequences decoding than this do not speculate: verifying drafts costs
  // compute, and a step that many sequences share is compute-bound already.
  int max_sequences = 4;
  // Tokens the shared suffix cache keeps (kSuffix).
  int64_t suffix_cache_tokens = int64_t{1} << 20;
  // How many guesses to verify: true, as many as pay off by the measured step costs and the
  // sequence's acceptance so far (step_cost_model.h); false, always max_draft_tokens where
  // there is room and a guess (for measurements, and tests that need drafts to happen).
  bool adaptive = true;

  bool enabled() const { return mode != SpeculativeMode::kOff && max_draft_tokens > 0; }
};

// "off", "ngram", "suffix", "draft", "mtp".
Result<SpeculativeMode> parse_speculative_mode(std::string_view name);
const char* speculative_mode_name(SpeculativeMode mode);

}  // namespace tachyon
