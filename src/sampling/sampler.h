// Logits → one token, per sequence. Processing order (as Hugging Face and vLLM order their
// processors; llama.cpp applies temperature after truncation instead):
//
//   1. logit_bias           added to the raw logits
//   2. repetition penalty   distinct tokens in the last penalty_last_n of prompt + output
//      presence/frequency   generated tokens only
//   3. temperature == 0  ⇒  argmax (lowest id on ties); stop here
//   4. temperature          logits divided by it
//   5. top-k                exactly k tokens (partial selection, no full sort)
//   6. top-p                over the top-k survivors, renormalised (sorts only what it needs)
//   7. min-p                relative to the most likely token
//   8. draw                 inverse CDF over the survivors with one uniform draw
//
// With a TokenConstraint (a grammar) the result is a token it allows: the token picked by
// steps 3-8 is checked first and, when the constraint rejects it, the logits are masked (-inf
// for every disallowed token) and the pick is made again; when logprobs or truncation depend on
// the mask, it is applied after step 2 instead (see sample()).
//
// Logprobs (when SamplingParams::logprobs) come from the distribution after steps 1–4, before
// any truncation: log-softmax of the biased, penalised, temperature-scaled logits over the
// whole vocabulary. Greedy requests use temperature 1 for this.
//
// Randomness: std::mt19937_64 (its output sequence is fixed by the C++ standard) seeded with
// `seed`; each sampled (non-greedy) token consumes exactly one 64-bit output, turned into a
// double in [0, 1) from its top 53 bits. Greedy consumes none. Sampling weights use our own
// branch-free exp (not libm's), so the same seed and logits give the same tokens across
// platforms and standard libraries, not just across runs.
//
// Cost per call, vocab V: a few O(V) passes; top-k adds O(V) with a k-heap (nth_element for
// k > 2048); top-p sorts only the tokens within e^-8 of the best (more only if they do not
// hold top_p of the mass). Scratch is reused: no allocation after the first calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sampling/sampling_params.h"
#include "sampling/token_constraint.h"

namespace tachyon {

struct TokenLogprob {
  TokenId token = -1;
  float logprob = 0.0f;  // natural log; -inf for a token with probability 0
};

struct SampleLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first (lowest id on ties), top_logprobs long
};

class Sampler {
 public:
  // `params` must be valid for `vocab_size` (checked); use create() for untrusted params.
  Sampler(SamplingParams params, int32_t vocab_size);
  static Result<Sampler> create(SamplingParams params, int32_t vocab_size);

  // Picks the next token. `logits`: f32 [vocab_size], modified in place. `context`: prompt +
  // tokens generated so far; its first `num_prompt_tokens` are the prompt. Ids in `context`
  // outside the vocabulary are ignored by the penalties. NaN logits count as -infinity; +inf
  // logits share all the probability; if every logit is -inf or NaN the result is token 0.
  //
  // With a `constraint` the token is one it allows, and it has been accepted by it; when it
  // allows nothing, constraint_failed() is true afterwards (the token is then meaningless).
  TokenId sample(std::span<float> logits, std::span<const TokenId> context,
                 size_t num_prompt_tokens, TokenConstraint* constraint = nullptr);
  bool constraint_failed() const { return constraint_failed_; }

  // Steps 1–2 alone, in place: exposed for tests and for callers that need the processed
  // logits (e.g. speculative verification).
  void apply_bias_and_penalties(std::span<float> logits, std::span<const TokenId> context,
                                size_t num_prompt_tokens);

  // After sample() when params().logprobs: the chosen token's logprob and the top alternatives.
  const SampleLogprobs& last_logprobs() const { return logprobs_; }

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }
  // The seed actually used (drawn from std::random_device when params had none), so that a run
  // without a seed can be replayed.
  uint64_t seed() const { return seed_; }

 private:
  struct Candidate {
    float logit;
    TokenId id;
  };

  // Steps 3-8 on biased, penalised logits.
  TokenId pick(std::span<float> logits);
  // A second pick after the constraint rejected the first and masked the logits.
  TokenId pick_again(std::span<float> logits);
  // Inverse CDF over the whole vocabulary; `logits` are relative to their best (<= 0).
  TokenId draw_whole_vocabulary(std::span<const float> logits, double u) const;
  void apply_penalties(std::span<float> logits, std::span<const TokenId> context,
                       size_t num_prompt_tokens);
  // Normaliser and top-N of the distribution in `logits`; then the chosen token's entry.
  void compute_logprobs(std::span<const float> logits);
  void set_chosen_logprob(std::span<const float> logits, TokenId chosen);
  float logprob_of(float logit) const;
  // More likely first, lower id first on ties: a strict total order.
  static bool better(const Candidate& a, const Candidate& b);
  // Fill candidates_ with the k best tokens (k < vocab), sorted best first; return k.
  size_t select_top_k(std::span<const float> logits, size_t k);
  // Fill candidates_ with the best tokens, sorted best first, enough of them to hold `target`
  // of the unnormalised mass Σ exp(logit); return how many.
  size_t collect_nucleus(std::span<const float> logits, double target);
  double uniform();

  SamplingParams params_;
  int32_t vocab_size_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<std::pair<TokenId, float>> bias_;  // logit_bias flattened

  // Scratch reused across calls (allocated on first need, never shrunk).
  std::vector<Candidate> candidates_;   // up to [vocab_size], top-k / top-p
  std::vector<int32_t> output_counts_;  // [vocab_size] zero between calls
  std::vector<uint8_t> in_window_;      // [vocab_size] zero between calls
  std::vector<TokenId> touched_;        // ids whose counts/flags need resetting
  SampleLogprobs logprobs_;
  float logprob_max_ = 0.0f;     // of the distribution last passed to compute_logprobs
  double log_normalizer_ = 0.0;  // log Σ exp(logit - logprob_max_)
  bool constraint_failed_ = false;
};

}  // namespace tachyon
