#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace tachyon {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

std::vector<float> random_logits(size_t size, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);  // test data only; platform-dependent ok
  std::vector<float> logits(size);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

// Samples once from a fresh copy of `logits` (sample() modifies them).
TokenId draw(Sampler& sampler, const std::vector<float>& logits,
             std::span<const TokenId> context = {}, size_t num_prompt_tokens = 0) {
  std::vector<float> copy = logits;
  return sampler.sample(copy, context, num_prompt_tokens);
}

// Reference softmax of logits / temperature, in double.
std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::exp((logits[i] - max) / temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;
  return probs;
}

// Ids ordered by probability, best first, lowest id on ties.
std::vector<TokenId> ranked(const std::vector<float>& logits) {
  std::vector<TokenId> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  return ids;
}

// Draws `num_draws` tokens and checks each is in `allowed`; every allowed token whose
// renormalised probability is at least 1% must show up.
void expect_draws_within(Sampler& sampler, const std::vector<float>& logits,
                         const std::set<TokenId>& allowed, int num_draws = 3000) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < num_draws; ++i) {
    const TokenId token = draw(sampler, logits);
    ASSERT_TRUE(allowed.count(token)) << "token " << token << " is outside the allowed set";
    ++counts[static_cast<size_t>(token)];
  }
  const std::vector<double> probs = softmax(logits, sampler.params().temperature);
  double allowed_mass = 0.0;
  for (TokenId id : allowed) allowed_mass += probs[static_cast<size_t>(id)];
  for (TokenId id : allowed) {
    if (probs[static_cast<size_t>(id)] / allowed_mass >= 0.01) {
      EXPECT_GT(counts[static_cast<size_t>(id)], 0) << "allowed token " << id << " never drawn";
    }
  }
}

// Pearson's chi-square of `counts` against `expected` probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& expected, int n) {
  double chi = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = expected[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// ---------------------------------------------------------------- greedy

TEST(SamplerTest, GreedyIsArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = 3;  // truncation is irrelevant to greedy
  params.top_p = 0.1f;
  Sampler sampler(params, 50000);
  for (uint64_t trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = random_logits(50000, trial);
    const auto best = std::max_element(logits.begin(), logits.end());  // first on ties
    EXPECT_EQ(draw(sampler, logits), static_cast<TokenId>(best - logits.begin()));
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 6);
  EXPECT_EQ(draw(sampler, {1.0f, 5.0f, 2.0f, 5.0f, 5.0f, -1.0f}), 1);
  EXPECT_EQ(draw(sampler, {7.0f, 7.0f, 7.0f, 7.0f, 7.0f, 7.0f}), 0);
  EXPECT_EQ(draw(sampler, {-kInf, -kInf, 3.0f, -kInf, 3.0f, 3.0f}), 2);
}

TEST(SamplerTest, GreedySkipsNanAndSurvivesAllBanned) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 4);
  const float nan = std::nanf("");
  EXPECT_EQ(draw(sampler, {nan, 1.0f, nan, 2.0f}), 3);
  EXPECT_EQ(draw(sampler, {-kInf, -kInf, -kInf, -kInf}), 0);
}

// ---------------------------------------------------------------- randomness

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const int32_t vocab = 8000;
  std::vector<std::vector<float>> steps;
  for (uint64_t step = 0; step < 50; ++step)
    steps.push_back(random_logits(vocab, 1000 + step, 1.0f));
  auto run = [&](uint64_t seed, float top_p, int32_t top_k) {
    SamplingParams params = seeded(seed);
    params.temperature = 1.3f;
    params.top_p = top_p;
    params.top_k = top_k;
    Sampler sampler(params, vocab);
    std::vector<TokenId> tokens;
    for (const std::vector<float>& logits : steps) tokens.push_back(draw(sampler, logits));
    return tokens;
  };
  for (auto [top_p, top_k] : {std::pair{1.0f, 0}, std::pair{0.9f, 0}, std::pair{1.0f, 40},
                              std::pair{0.95f, 100}, std::pair{1.0f, 5000}}) {
    EXPECT_EQ(run(7, top_p, top_k), run(7, top_p, top_k));
    EXPECT_NE(run(7, top_p, top_k), run(8, top_p, top_k));
  }
}

TEST(SamplerTest, DrawIsTopBitsOfMt19937_64) {
  // Two equally likely tokens: token 0 iff the documented uniform draw is below one half.
  for (uint64_t seed : {0ull, 1ull, 42ull, 123456789ull}) {
    Sampler sampler(seeded(seed), 2);
    std::mt19937_64 reference(seed);
    for (int i = 0; i < 64; ++i) {
      const double u = static_cast<double>(reference() >> 11) * 0x1.0p-53;
      EXPECT_EQ(draw(sampler, {0.5f, 0.5f}), u < 0.5 ? 0 : 1);
    }
  }
}

TEST(SamplerTest, UnseededSamplerReportsReplayableSeed) {
  SamplingParams params;
  params.temperature = 0.8f;
  Sampler first(params, 1000);
  params.seed = first.seed();
  Sampler replay(params, 1000);
  const std::vector<float> logits = random_logits(1000, 3, 1.0f);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw(first, logits), draw(replay, logits));
}

// ---------------------------------------------------------------- truncation

TEST(SamplerTest, TopKOnlyReturnsTheKBest) {
  const std::vector<float> logits = random_logits(20, 11, 1.0f);
  const std::vector<TokenId> order = ranked(logits);
  for (int32_t k : {1, 2, 5, 19}) {
    SamplingParams params = seeded(k);
    params.top_k = k;
    Sampler sampler(params, 20);
    expect_draws_within(sampler, logits, std::set<TokenId>(order.begin(), order.begin() + k));
  }
  // k at or above the vocabulary is off.
  SamplingParams params = seeded(5);
  params.top_k = 20;
  Sampler sampler(params, 20);
  expect_draws_within(sampler, logits, std::set<TokenId>(order.begin(), order.end()));
}

TEST(SamplerTest, TopKKeepsExactlyKWithLowestIdsOnTies) {
  SamplingParams params = seeded(3);
  params.top_k = 3;
  Sampler sampler(params, 8);
  // Tokens 1, 2, 4, 6 tie for best; exactly three survive: 1, 2, 4.
  expect_draws_within(sampler, {0.0f, 2.0f, 2.0f, 1.0f, 2.0f, 0.0f, 2.0f, 1.5f}, {1, 2, 4});
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  const std::vector<float> logits = random_logits(12, 21, 1.5f);
  const std::vector<TokenId> order = ranked(logits);
  const std::vector<double> probs = softmax(logits);
  std::vector<double> cumulative;
  double sum = 0.0;
  for (TokenId id : order) cumulative.push_back(sum += probs[static_cast<size_t>(id)]);
  // A top_p between two cumulative sums selects a known prefix, far from float rounding.
  for (size_t size = 1; size <= order.size(); ++size) {
    const double below = size >= 2 ? cumulative[size - 2] : 0.0;
    SamplingParams params = seeded(size);
    params.top_p = static_cast<float>((below + cumulative[size - 1]) / 2);
    if (params.top_p >= 1.0f) continue;
    Sampler sampler(params, 12);
    expect_draws_within(sampler, logits, std::set<TokenId>(order.begin(), order.begin() + size));
  }
  // Tiny top_p: only the most likely token.
  SamplingParams params = seeded(1);
  params.top_p = 1e-7f;
  Sampler sampler(params, 12);
  expect_draws_within(sampler, logits, {order[0]}, 200);
}

// Membership in the expected nucleus over a large vocabulary, with a margin of two tokens for
// float-vs-double rounding at its edge.
void expect_nucleus_on_large_vocabulary(const std::vector<float>& logits, float top_p,
                                        int num_draws) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const std::vector<TokenId> order = ranked(logits);
  const std::vector<double> probs = softmax(logits);
  double sum = 0.0;
  size_t size = 0;
  while (sum < top_p) sum += probs[static_cast<size_t>(order[size++])];
  const std::set<TokenId> allowed(order.begin(),
                                  order.begin() + std::min<size_t>(size + 2, logits.size()));
  SamplingParams params = seeded(9);
  params.top_p = top_p;
  Sampler sampler(params, vocab);
  for (int i = 0; i < num_draws; ++i) {
    const TokenId token = draw(sampler, logits);
    ASSERT_TRUE(allowed.count(token)) << token << " outside nucleus of " << size;
  }
}

TEST(SamplerTest, TopPOverLargeVocabulary) {
  // Nearly flat: the nucleus is most of the vocabulary.
  const std::vector<float> flat = random_logits(152064, 5, 0.05f);
  for (float top_p : {0.05f, 0.95f}) expect_nucleus_on_large_vocabulary(flat, top_p, 4);
  // One strong token plus a long tail just below e^-8 of it that holds most of the mass: the
  // first threshold round is not enough.
  std::vector<float> tail = random_logits(100000, 6, 0.3f);
  for (float& logit : tail) logit -= 10.0f;
  tail[777] = 0.0f;
  for (float top_p : {0.01f, 0.3f, 0.9f}) expect_nucleus_on_large_vocabulary(tail, top_p, 10);
}

TEST(SamplerTest, LargeTopKUsesSelectionAndStaysInTheSet) {
  const std::vector<float> logits = random_logits(10000, 8, 2.0f);
  const std::vector<TokenId> order = ranked(logits);
  for (int32_t k : {2048, 2049, 7000}) {  // heap below the limit, nth_element above
    SamplingParams params = seeded(k);
    params.top_k = k;
    params.temperature = 3.0f;  // flatten so the tail gets drawn
    Sampler sampler(params, 10000);
    const std::set<TokenId> allowed(order.begin(), order.begin() + k);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(allowed.count(draw(sampler, logits)));
  }
}

TEST(SamplerTest, MinPKeepsTokensNearTheBest) {
  const std::vector<float> logits = random_logits(16, 31, 1.5f);
  const std::vector<TokenId> order = ranked(logits);
  const std::vector<double> probs = softmax(logits);
  const double best = probs[static_cast<size_t>(order[0])];
  for (size_t size = 1; size <= order.size(); ++size) {
    // Between the ratios of the last kept and the first dropped token.
    const double low = size < order.size() ? probs[static_cast<size_t>(order[size])] / best : 0.0;
    const double high = probs[static_cast<size_t>(order[size - 1])] / best;
    SamplingParams params = seeded(size);
    params.min_p = static_cast<float>((low + high) / 2);
    for (int32_t top_k : {0, 16}) {  // 16 = vocab: also runs the unsorted full-vocab path
      params.top_k = top_k;
      Sampler sampler(params, 16);
      expect_draws_within(sampler, logits, std::set<TokenId>(order.begin(), order.begin() + size),
                          1500);
    }
    params.top_k = 0;
    params.top_p = 0.999999f;  // forces the sorted candidate path
    Sampler sorted_sampler(params, 16);
    expect_draws_within(sorted_sampler, logits,
                        std::set<TokenId>(order.begin(), order.begin() + size), 1500);
  }
}

TEST(SamplerTest, MinPOneKeepsOnlyTheBestAndItsTies) {
  SamplingParams params = seeded(4);
  params.min_p = 1.0f;
  Sampler sampler(params, 6);
  expect_draws_within(sampler, {0.0f, 3.0f, 1.0f, 2.9f, -1.0f, 0.5f}, {1}, 200);
  expect_draws_within(sampler, {0.0f, 3.0f, 1.0f, 3.0f, -1.0f, 0.5f}, {1, 3}, 400);
}

TEST(SamplerTest, TopKThenTopPThenMinPCompose) {
  // top-k = 6 keeps the six best; top-p over those renormalised; min-p last.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 3.0f, 2.5f, -1.0f, 1.5f, 0.5f, -2.0f, 0.2f};
  const std::vector<TokenId> order = ranked(logits);  // 3, 4, 0, 6, 1, 7, 9, 2, 5, 8
  std::vector<double> renormalised;
  double total = 0.0;
  for (int i = 0; i < 6; ++i) total += std::exp(logits[static_cast<size_t>(order[i])]);
  double cumulative = 0.0;
  for (int i = 0; i < 6; ++i) {
    renormalised.push_back(cumulative += std::exp(logits[static_cast<size_t>(order[i])]) / total);
  }
  SamplingParams params = seeded(17);
  params.top_k = 6;
  params.top_p = static_cast<float>((renormalised[2] + renormalised[3]) / 2);  // keeps 4
  Sampler top_k_top_p(params, 10);
  expect_draws_within(top_k_top_p, logits, {3, 4, 0, 6});
  // min-p with ratio threshold between tokens 0 (e^-1) and 6 (e^-1.5): keeps 3.
  params.min_p = std::exp(-1.25f);
  Sampler all_three(params, 10);
  expect_draws_within(all_three, logits, {3, 4, 0});
}

// ---------------------------------------------------------------- distribution

TEST(SamplerTest, TemperatureSamplingMatchesSoftmax) {
  // 20k draws with fixed seeds. With 7 degrees of freedom, chi-square exceeds 40 with
  // probability about 1e-6, so the bound never flakes; a temperature 25% off scores 200+.
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.3f};
  constexpr int kDraws = 20000;
  for (float temperature : {0.7f, 1.0f, 1.8f}) {
    Sampler sampler(
        [&] {
          SamplingParams params = seeded(2024);
          params.temperature = temperature;
          return params;
        }(),
        8);
    std::vector<int> counts(8, 0);
    for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(draw(sampler, logits))];
    EXPECT_LT(chi_square(counts, softmax(logits, temperature), kDraws), 40.0) << temperature;
    EXPECT_GT(chi_square(counts, softmax(logits, temperature * 1.25), kDraws), 100.0)
        << temperature;
    EXPECT_GT(chi_square(counts, softmax(logits, temperature / 1.25), kDraws), 100.0)
        << temperature;
  }
}

TEST(SamplerTest, TruncatedSamplingMatchesRenormalisedSoftmax) {
  // The candidate path (top-k) must draw in proportion too, not just stay in the set.
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.3f};
  constexpr int kDraws = 20000;
  SamplingParams params = seeded(99);
  params.temperature = 0.9f;
  params.top_k = 5;
  Sampler sampler(params, 8);
  std::vector<int> counts(8, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(draw(sampler, logits))];
  std::vector<double> expected = softmax(logits, 0.9);
  const std::vector<TokenId> order = ranked(logits);
  for (size_t i = 5; i < order.size(); ++i) expected[static_cast<size_t>(order[i])] = 0.0;
  const double mass = std::accumulate(expected.begin(), expected.end(), 0.0);
  for (double& p : expected) p /= mass;
  EXPECT_LT(chi_square(counts, expected, kDraws), 35.0);  // 4 degrees of freedom
}

// ---------------------------------------------------------------- penalties and bias

TEST(SamplerTest, PenaltiesMatchHandComputedValues) {
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  Sampler sampler(params, 8);
  // Prompt: 1 2 2 3 | output: 3 4 4 4 and an out-of-vocabulary id (ignored).
  const std::vector<TokenId> context = {1, 2, 2, 3, 3, 4, 4, 4, 99};
  const std::vector<float> original = {1.0f, 2.0f, -2.0f, 3.0f, 0.0f, 4.0f, -1.0f, 0.5f};
  for (int repeat = 0; repeat < 2; ++repeat) {  // scratch must reset between calls
    std::vector<float> logits = original;
    sampler.apply_bias_and_penalties(logits, context, 4);
    EXPECT_FLOAT_EQ(logits[0], 1.0f);                        // untouched
    EXPECT_FLOAT_EQ(logits[1], 2.0f / 1.5f);                 // prompt only: repetition only
    EXPECT_FLOAT_EQ(logits[2], -2.0f * 1.5f);                // negative: multiplied
    EXPECT_FLOAT_EQ(logits[3], 3.0f / 1.5f - 0.5f - 0.25f);  // once in output
    EXPECT_FLOAT_EQ(logits[4], 0.0f - 0.5f - 0.75f);         // 0 stays 0, then three times
    EXPECT_FLOAT_EQ(logits[5], 4.0f);
    EXPECT_FLOAT_EQ(logits[6], -1.0f);
    EXPECT_FLOAT_EQ(logits[7], 0.5f);
  }
}

TEST(SamplerTest, RepetitionPenaltyWindow) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.penalty_last_n = 2;
  Sampler windowed(params, 4);
  const std::vector<TokenId> context = {0, 1, 2, 2};
  std::vector<float> logits = {4.0f, 4.0f, 4.0f, 4.0f};
  windowed.apply_bias_and_penalties(logits, context, 2);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 4.0f, 2.0f, 4.0f}));

  params.penalty_last_n = 0;
  Sampler off(params, 4);
  logits = {4.0f, 4.0f, 4.0f, 4.0f};
  off.apply_bias_and_penalties(logits, context, 2);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 4.0f, 4.0f, 4.0f}));

  params.penalty_last_n = -1;
  Sampler all(params, 4);
  logits = {4.0f, 4.0f, 4.0f, -4.0f};
  all.apply_bias_and_penalties(logits, context, 2);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, 2.0f, 2.0f, -4.0f}));
}

TEST(SamplerTest, BiasIsAppliedBeforePenalties) {
  SamplingParams params;
  params.logit_bias = {{1, 3.0f}};
  params.repetition_penalty = 2.0f;
  Sampler sampler(params, 3);
  std::vector<float> logits = {0.0f, -1.0f, 1.0f};
  const std::vector<TokenId> context = {1};
  sampler.apply_bias_and_penalties(logits, context, 1);
  EXPECT_FLOAT_EQ(logits[1], (-1.0f + 3.0f) / 2.0f);
}

TEST(SamplerTest, LogitBiasBansAndForces) {
  const std::vector<float> logits = random_logits(1000, 41, 2.0f);
  const std::vector<TokenId> order = ranked(logits);
  for (float temperature : {0.0f, 1.0f, 1.5f}) {
    SamplingParams params = seeded(5);
    params.temperature = temperature;
    params.logit_bias = {{order[0], -100.0f}};
    Sampler banned(params, 1000);
    for (int i = 0; i < 500; ++i) EXPECT_NE(draw(banned, logits), order[0]);

    params.logit_bias = {{order[0], -kInf}, {order[1], -kInf}};
    Sampler hard_banned(params, 1000);
    for (int i = 0; i < 500; ++i) {
      const TokenId token = draw(hard_banned, logits);
      EXPECT_NE(token, order[0]);
      EXPECT_NE(token, order[1]);
    }

    params.logit_bias = {{order.back(), 100.0f}};  // the least likely token
    Sampler forced(params, 1000);
    for (int i = 0; i < 500; ++i) EXPECT_EQ(draw(forced, logits), order.back());
  }
}

// ---------------------------------------------------------------- logprobs

TEST(SamplerTest, LogprobsAfterTemperatureBeforeTruncation) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f, 0.0f};
  SamplingParams params = seeded(1);
  params.temperature = 0.5f;
  params.top_k = 2;  // must not affect logprobs
  params.logprobs = true;
  params.top_logprobs = 3;
  Sampler sampler(params, 5);
  const std::vector<double> probs = softmax(logits, 0.5);
  for (int i = 0; i < 20; ++i) {
    const TokenId token = draw(sampler, logits);
    const SampleLogprobs& result = sampler.last_logprobs();
    EXPECT_EQ(result.chosen.token, token);
    EXPECT_NEAR(result.chosen.logprob, std::log(probs[static_cast<size_t>(token)]), 1e-5);
    ASSERT_EQ(result.top.size(), 3u);
    EXPECT_EQ(result.top[0].token, 1);
    EXPECT_EQ(result.top[1].token, 2);
    EXPECT_EQ(result.top[2].token, 0);
    for (const TokenLogprob& entry : result.top) {
      EXPECT_NEAR(entry.logprob, std::log(probs[static_cast<size_t>(entry.token)]), 1e-5);
    }
  }
}

TEST(SamplerTest, GreedyLogprobsUseTemperatureOneAndTiesByLowestId) {
  const std::vector<float> logits = {2.0f, 1.0f, 2.0f, 0.5f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = true;
  params.top_logprobs = 4;
  Sampler sampler(params, 4);
  EXPECT_EQ(draw(sampler, logits), 0);
  const std::vector<double> probs = softmax(logits);
  const SampleLogprobs& result = sampler.last_logprobs();
  EXPECT_NEAR(result.chosen.logprob, std::log(probs[0]), 1e-6);
  ASSERT_EQ(result.top.size(), 4u);
  EXPECT_EQ(result.top[0].token, 0);
  EXPECT_EQ(result.top[1].token, 2);
  EXPECT_EQ(result.top[2].token, 1);
  EXPECT_EQ(result.top[3].token, 3);
}

// ---------------------------------------------------------------- degenerate logits

TEST(SamplerTest, NanAndInfinityAreHandled) {
  const float nan = std::nanf("");
  SamplingParams params = seeded(12);
  params.top_p = 0.9f;
  Sampler sampler(params, 5);
  expect_draws_within(sampler, {nan, 1.0f, nan, 1.0f, -kInf}, {1, 3}, 200);
  EXPECT_EQ(draw(sampler, {-kInf, -kInf, nan, -kInf, -kInf}), 0);

  Sampler plain(seeded(13), 5);
  for (int i = 0; i < 100; ++i) {
    const TokenId token = draw(plain, {0.0f, kInf, 5.0f, kInf, nan});
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
}

TEST(SamplerTest, TinyTemperatureDoesNotOverflow) {
  SamplingParams params = seeded(2);
  params.temperature = 1e-30f;
  Sampler sampler(params, 4);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw(sampler, {1.0f, 1e30f, 2.0f, -1e30f}), 1);
}

TEST(SamplerTest, CreateRejectsInvalidParams) {
  SamplingParams params;
  params.top_p = 2.0f;
  const Result<Sampler> result = Sampler::create(params, 10);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "top_p must be in (0, 1], got 2");
  EXPECT_TRUE(Sampler::create(SamplingParams(), 10).ok());
}

}  // namespace
}  // namespace tachyon

// ---------------------------------------------------------------- constraints

namespace tachyon {
namespace {

// Allows a fixed set of tokens at every step; counts how often the mask had to be built.
class SetConstraint : public TokenConstraint {
 public:
  explicit SetConstraint(std::set<TokenId> allowed) : allowed_(std::move(allowed)) {}
  bool accept(TokenId token) override {
    if (!allowed_.count(token)) return false;
    accepted.push_back(token);
    return true;
  }
  void mask(std::span<float> logits) override {
    ++masks;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!allowed_.count(static_cast<TokenId>(i))) logits[i] = -kInf;
    }
  }
  void rollback(int num_tokens) override { accepted.resize(accepted.size() - num_tokens); }
  bool is_terminated() const override { return false; }

  std::vector<TokenId> accepted;
  int masks = 0;

 private:
  std::set<TokenId> allowed_;
};

TokenId draw_constrained(Sampler& sampler, const std::vector<float>& logits,
                         TokenConstraint& constraint) {
  std::vector<float> copy = logits;
  return sampler.sample(copy, {}, 0, &constraint);
}

TEST(SamplerConstraintTest, GreedyChecksTheBestTokenFirst) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 4);
  SetConstraint allows_best({1, 3});
  EXPECT_EQ(draw_constrained(sampler, logits, allows_best), 1);
  EXPECT_EQ(allows_best.masks, 0);  // the argmax was allowed: no mask built
  SetConstraint rejects_best({0, 2, 3});
  EXPECT_EQ(draw_constrained(sampler, logits, rejects_best), 2);
  EXPECT_EQ(rejects_best.masks, 1);
  EXPECT_EQ(rejects_best.accepted, std::vector<TokenId>{2});
  EXPECT_FALSE(sampler.constraint_failed());
}

TEST(SamplerConstraintTest, NothingAllowedIsReported) {
  const std::vector<float> logits = {1.0f, 3.0f};
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams params = seeded(5);
    params.temperature = temperature;
    Sampler sampler(params, 2);
    SetConstraint none({});
    draw_constrained(sampler, logits, none);
    EXPECT_TRUE(sampler.constraint_failed()) << temperature;
    EXPECT_TRUE(none.accepted.empty());
  }
}

TEST(SamplerConstraintTest, SamplingDrawsFromTheMaskedDistribution) {
  // Check-first-then-redraw must give each allowed token p / (allowed mass) exactly, whether
  // or not a mask is built first (top-k forces it first; logprobs too).
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.3f};
  const std::set<TokenId> allowed = {0, 2, 3, 5, 7};  // the three best are not allowed
  constexpr int kDraws = 20000;
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams params = seeded(77 + variant);
    params.temperature = 0.8f;
    if (variant == 1) params.top_k = 8;  // truncation that keeps everything
    if (variant == 2) params.logprobs = true;
    Sampler sampler(params, 8);
    SetConstraint constraint(allowed);
    std::vector<int> counts(8, 0);
    for (int i = 0; i < kDraws; ++i) {
      ++counts[static_cast<size_t>(draw_constrained(sampler, logits, constraint))];
      ASSERT_FALSE(sampler.constraint_failed());
    }
    EXPECT_EQ(constraint.accepted.size(), static_cast<size_t>(kDraws));
    std::vector<double> expected = softmax(logits, 0.8);
    double mass = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (!allowed.count(static_cast<TokenId>(i))) expected[i] = 0.0;
      mass += expected[i];
    }
    for (double& p : expected) p /= mass;
    EXPECT_LT(chi_square(counts, expected, kDraws), 35.0) << variant;  // 4 degrees of freedom
    if (variant == 0) {
      EXPECT_LT(constraint.masks, kDraws);  // allowed first draws needed no mask
    } else {
      EXPECT_EQ(constraint.masks, kDraws);
    }
  }
}

TEST(SamplerConstraintTest, LogprobsDescribeTheConstrainedDistribution) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = true;
  params.top_logprobs = 4;
  Sampler sampler(params, 4);
  SetConstraint constraint({0, 2});
  EXPECT_EQ(draw_constrained(sampler, logits, constraint), 2);
  const SampleLogprobs& logprobs = sampler.last_logprobs();
  const double expected = 2.0 - std::log(std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(logprobs.chosen.logprob, expected, 1e-5);
  ASSERT_EQ(logprobs.top.size(), 4u);
  EXPECT_EQ(logprobs.top[0].token, 2);
  EXPECT_EQ(logprobs.top[1].token, 0);
  EXPECT_EQ(logprobs.top[2].logprob, -kInf);  // not allowed: probability 0
}

TEST(SamplerConstraintTest, SameSeedSameConstrainedTokens) {
  const std::vector<float> logits = random_logits(64, 9);
  std::set<TokenId> allowed;
  for (TokenId id = 0; id < 64; id += 3) allowed.insert(id);
  std::vector<TokenId> first, second;
  for (std::vector<TokenId>* out : {&first, &second}) {
    Sampler sampler(seeded(42), 64);
    SetConstraint constraint(allowed);
    for (int i = 0; i < 200; ++i) out->push_back(draw_constrained(sampler, logits, constraint));
  }
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace tachyon
