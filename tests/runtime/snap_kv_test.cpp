// SnapKV on the default model: a 512-token corpus window's KV compressed to half (256 positions
// per KV head) changes the next-token distributions of the 32 tokens after it less (mean KL
// divergence against the full cache) than keeping only the most recent half; and the kept
// positions are what the scorer promises (the window always, as many for every head).
#include "runtime/snap_kv.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/paths.h"
#include "engine_test_util.h"

namespace tachyon {
namespace {

constexpr int kPrompt = 512, kContinuation = 32, kBudget = 256;

// Mean over rows of KL(p || q) of the softmaxes of two f32 [rows, vocab] logit tables.
double mean_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits,
               int vocab) {
  const int rows = static_cast<int>(p_logits.size() / vocab);
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    auto log_softmax = [&](const float* logits) {
      std::vector<double> out(logits, logits + vocab);
      const double max = *std::max_element(out.begin(), out.end());
      double sum = 0;
      for (double x : out) sum += std::exp(x - max);
      const double log_sum = std::log(sum) + max;
      for (double& x : out) x -= log_sum;
      return out;
    };
    const std::vector<double> p = log_softmax(p_logits.data() + static_cast<size_t>(r) * vocab);
    const std::vector<double> q = log_softmax(q_logits.data() + static_cast<size_t>(r) * vocab);
    for (int v = 0; v < vocab; ++v) total += std::exp(p[v]) * (p[v] - q[v]);
  }
  return total / rows;
}

TEST(SnapKvTest, HalfTheCacheLosesLessThanKeepingTheRecentHalf) {
  testing_util::LoadedModel loaded = testing_util::load_model(default_model_path());
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  const ModelConfig& config = model.config();
  const int vocab = config.vocab_size;
  ThreadPool pool(2);
  std::ifstream in(std::string(TACHYON_SHARED_DIR) + "/data/corpus/tinyshakespeare.txt");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<TokenId> corpus =
      loaded.tokenizer->encode(text.str().substr(0, 200000), {.parse_special = false});
  double snap_total = 0, recent_total = 0;
  const int windows = 4;
  for (int w = 0; w < windows; ++w) {
    const auto begin = corpus.begin() + 5000 + w * 9000;
    const std::vector<TokenId> prompt(begin, begin + kPrompt);
    const std::vector<TokenId> next(begin + kPrompt, begin + kPrompt + kContinuation);
    std::vector<float> logits, full, snap, recent;

    KvCache cache = model.make_cache(kPrompt + kContinuation);
    ASSERT_TRUE(model.forward(prompt, 0, cache, pool, 1, logits).ok());
    ASSERT_TRUE(model.forward(next, kPrompt, cache, pool, kContinuation, full).ok());

    // SnapKV: scored while the prompt runs (in two chunks, as a server would), then compacted.
    KvCache snap_cache = model.make_cache(kPrompt + kContinuation);
    SnapKvScorer scorer(model, kPrompt, {.budget = kBudget});
    for (int start : {0, 300}) {
      const int count = start == 0 ? 300 : kPrompt - 300;
      auto observe = [&](int layer, const float* queries, int num_tokens) {
        scorer.observe(snap_cache, start, layer, queries, num_tokens);
      };
      const DecoderModel::AttentionObserver observer = observe;
      ASSERT_TRUE(model.forward(std::span(prompt).subspan(start, count), start, snap_cache, pool,
                                1, logits, 0, &observer)
                      .ok());
    }
    const KeptPositions kept = scorer.kept_positions();
    ASSERT_EQ(kept.size(), static_cast<size_t>(config.num_layers));
    bool heads_differ = false;
    for (const auto& layer : kept) {
      for (const std::vector<int>& positions : layer) {
        ASSERT_EQ(positions.size(), static_cast<size_t>(kBudget));
        ASSERT_TRUE(std::is_sorted(positions.begin(), positions.end()));
        ASSERT_EQ(positions.back(), kPrompt - 1);
        ASSERT_EQ(positions[kBudget - 32], kPrompt - 32);  // the observation window is kept
        heads_differ |= positions != layer[0];
      }
    }
    EXPECT_TRUE(heads_differ) << "every head kept the same positions";
    compact_cache(snap_cache, kept);
    ASSERT_TRUE(model.forward(next, kBudget, snap_cache, pool, kContinuation, snap,
                              kPrompt - kBudget)
                    .ok());

    KvCache recent_cache = model.make_cache(kPrompt + kContinuation);
    ASSERT_TRUE(model.forward(prompt, 0, recent_cache, pool, 1, logits).ok());
    compact_cache(recent_cache,
                  recent_positions(config.num_layers, config.num_kv_heads, kPrompt, kBudget));
    ASSERT_TRUE(model.forward(next, kBudget, recent_cache, pool, kContinuation, recent,
                              kPrompt - kBudget)
                    .ok());

    const double snap_kl = mean_kl(full, snap, vocab);
    const double recent_kl = mean_kl(full, recent, vocab);
    std::printf("window %d: mean KL vs the full cache: SnapKV %.4f, recent half %.4f\n", w,
                snap_kl, recent_kl);
    snap_total += snap_kl;
    recent_total += recent_kl;
  }
  std::printf("mean KL over %d windows: SnapKV %.4f, recent half %.4f\n", windows,
              snap_total / windows, recent_total / windows);
  EXPECT_LT(snap_total, recent_total);
}

// Keeping every position is the identity: the same logits as the uncompacted cache.
TEST(SnapKvTest, KeepingEverythingChangesNothing) {
  testing_util::LoadedModel loaded = testing_util::load_model(default_model_path());
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  ThreadPool pool(2);
  const std::vector<TokenId> prompt =
      loaded.tokenizer->encode("The quick brown fox jumps over the lazy dog. Twice, in fact.");
  const std::vector<TokenId> next = loaded.tokenizer->encode(" And then it slept");
  const int length = static_cast<int>(prompt.size());
  std::vector<float> logits, plain, compacted;
  KvCache cache = model.make_cache(64);
  ASSERT_TRUE(model.forward(prompt, 0, cache, pool, 1, logits).ok());
  ASSERT_TRUE(model.forward(next, length, cache, pool, 1, plain).ok());
  KvCache other = model.make_cache(64);
  SnapKvScorer scorer(model, length, {.budget = 1024, .window = 4});
  auto observe = [&](int layer, const float* queries, int num_tokens) {
    scorer.observe(other, 0, layer, queries, num_tokens);
  };
  const DecoderModel::AttentionObserver observer = observe;
  ASSERT_TRUE(model.forward(prompt, 0, other, pool, 1, logits, 0, &observer).ok());
  compact_cache(other, scorer.kept_positions());
  ASSERT_TRUE(model.forward(next, length, other, pool, 1, compacted).ok());
  EXPECT_EQ(plain, compacted);
}

}  // namespace
}  // namespace tachyon
