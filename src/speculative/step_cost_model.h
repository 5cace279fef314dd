// What a forward pass costs as a function of how many tokens it computes, learned from the
// passes actually run: a moving average of the seconds of steps of each size. Speculative
// decoding decides with it how many draft tokens pay off: on a memory-bound decode the first
// few extra tokens cost almost nothing (the weights are read once either way), and past the
// point where compute takes over each costs its full share. The curve differs per machine and
// model, so it is measured, not assumed; before any measurement a step of n tokens is taken to
// cost as much as one of a single token up to 4 tokens and proportionally more after.
#pragma once

#include <vector>

namespace tachyon {

class StepCostModel {
 public:
  static constexpr int kMaxTokens = 128;  // sizes beyond are extrapolated

  void observe(int num_tokens, double seconds);
  // Estimated seconds of a step of `num_tokens` tokens (≥ 1).
  double seconds(int num_tokens) const;
  // Whether a step of exactly this size was measured.
  bool measured(int num_tokens) const {
    return num_tokens >= 1 && num_tokens <= kMaxTokens && seen_[num_tokens];
  }

 private:
  // Per size: the average, and whether any step of that size was seen.
  double average_[kMaxTokens + 1] = {};
  bool seen_[kMaxTokens + 1] = {};
};

// How many draft tokens to verify for each candidate sequence in a step that already computes
// `base_tokens` tokens (one per decoding sequence, plus any prompt work): greedily, candidate
// by candidate, the length that maximises the step's expected tokens per second, given each
// candidate's per-token acceptance probability (a draft of k gives 1 + p + ... + p^k tokens in
// expectation) and the cost model. `available[i]`: the most tokens candidate i has proposed;
// the result is in 0..available[i].
std::vector<int> choose_draft_lengths(const StepCostModel& cost, int base_tokens,
                                      const std::vector<double>& acceptance,
                                      const std::vector<int>& available);

// Draft-model speculation: one length for every drafting sequence of a step (the draft model
// decodes them together, one pass per guess). The length that maximises expected tokens per
// second, the step costing target.seconds(base_tokens + n k) + k draft_pass_seconds for n
// drafting sequences; 0 when no length beats not drafting.
int choose_draft_model_length(const StepCostModel& target, double draft_pass_seconds,
                              int base_tokens, const std::vector<double>& acceptance,
                              int max_tokens);

}  // namespace tachyon
