#pragma once

#include <vector>

namespace tachyon {

// What a forward pass costs as a function of how many tokens it computes, learned from the
// passes actually run. Speculative decoding decides with it how many draft tokens pay off: on
// a memory-bound decode the first few extra tokens cost little (the weights are read once
// either way), and past the point where compute takes over each costs its full share. The
// curve differs per machine and model, so it is measured: per step size a moving average of
// the seconds; the estimate for size n is the least-squares line through the averages of the
// measured sizes near it (n/2 .. 2n + 2), each weighted by the square of how often it was seen
// (counted up to 16), and never less than the estimate for a smaller size.
// A local line rather than the averages themselves: one slow step of a size that is then never
// tried again would otherwise keep it looking expensive forever, and the line extends to sizes
// not tried yet. With fewer than two sizes nearby, the nearest measurement scaled by the
// prior's shape; with none at all the prior: a step of n tokens costs as much as one token up
// to 4 tokens and proportionally more after.
class StepCostModel {
 public:
  static constexpr int kMaxTokens = 128;  // bigger steps count as this size (proportionally)

  void observe(int num_tokens, double seconds);
  // Estimated seconds of a step of `num_tokens` tokens (≥ 1).
  double seconds(int num_tokens) const;
  // Whether a step of exactly this size was measured.
  bool measured(int num_tokens) const {
    return num_tokens >= 1 && num_tokens <= kMaxTokens && count_[num_tokens] > 0;
  }

 private:
  double local_estimate(int num_tokens) const;

  double average_[kMaxTokens + 1] = {};  // by size
  int count_[kMaxTokens + 1] = {};       // observations, up to 16
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
