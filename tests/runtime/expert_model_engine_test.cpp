// The serving engine's invariants on MoE, MLA and sliding-window models (tiny random
// DeepSeek-V3, DeepSeek-V2, Qwen3-MoE, Gemma 3 and Mistral shapes from tools/tiny_models.py,
// the windows of 5 to 12 positions shorter than most prompts): a request's tokens are the same
// alone or in a mixed batch of 16, from a prefix-cache hit or cold, preempted and resumed or
// not; every KV block comes back.
#include <gtest/gtest.h>

#include <random>

#include "model_files/gguf_file.h"
#include "runtime/engine.h"
#include "engine_test_util.h"

namespace tachyon {
namespace {

using testing_util::expect_pool_back_to_full;
using testing_util::greedy_request;
using testing_util::make_engine;
using testing_util::run_alone;

using testing_util::LoadedModel;

// The ctest fixture make_tiny_models writes the files.
LoadedModel load(const std::string& name) {
  return testing_util::load_model(std::string(TACHYON_TINY_MODELS) + "/" + name + ".f32.gguf");
}

// Random prompts of 3..45 tokens (the tiny models' context is 128 positions).
std::vector<std::vector<TokenId>> make_prompts(const DecoderModel& model, int count) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> token(0, model.config().vocab_size - 3);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<TokenId> prompt(3 + (i * 7) % 43);
    for (TokenId& id : prompt) id = token(rng);
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

class ExpertModelEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertModelEngineTest, BatchInvariance) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  options.max_batch_tokens = 64;  // prompts are split into chunks that mix with decodes
  options.enable_prefix_cache = false;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.model, 16);
  std::vector<std::vector<TokenId>> alone;
  for (int i : {0, 6, 13}) alone.push_back(run_alone(*engine, greedy_request(prompts[i], 30)).tokens);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    Result<std::shared_ptr<RequestStream>> stream =
        engine->submit(greedy_request(prompts[i], i == 13 ? 30 : 10 + i));
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    streams.push_back(*stream);
  }
  std::vector<EngineOutput> batched;
  for (auto& stream : streams) batched.push_back(stream->wait_for_all());
  EXPECT_EQ(batched[0].tokens, std::vector<TokenId>(alone[0].begin(), alone[0].begin() + 10));
  EXPECT_EQ(batched[6].tokens, std::vector<TokenId>(alone[1].begin(), alone[1].begin() + 16));
  EXPECT_EQ(batched[13].tokens, alone[2]);
  expect_pool_back_to_full(*engine);
}

TEST_P(ExpertModelEngineTest, PrefixCacheHitGivesTheSameTokens) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const std::vector<TokenId> prompt = make_prompts(*loaded.model, 7)[6];  // 45 tokens
  const EngineOutput cold = run_alone(*engine, greedy_request(prompt, 20));
  EXPECT_EQ(cold.cached_prompt_tokens, 0);
  const EngineOutput warm = run_alone(*engine, greedy_request(prompt, 20));
  EXPECT_EQ(warm.cached_prompt_tokens, 32);
  EXPECT_EQ(warm.tokens, cold.tokens);
  // MLA caches one latent of kv_lora_rank + qk_rope_head_dim values per token and layer (f16);
  // the others a key and a value per KV head. Models that mix sliding-window and global layers
  // grow by their global layers only (the local ones hold their window).
  const ModelConfig& config = loaded.model->config();
  const int64_t per_layer = config.mla.enabled() ? config.mla.latent_size()
                                                 : 2 * config.num_kv_heads * config.head_size;
  int growing_layers = 0;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    growing_layers += !config.layer_is_local(layer);
  }
  if (growing_layers == 0) growing_layers = config.num_layers;  // all local (Mistral): one pool
  EXPECT_EQ(engine->metrics().kv_bytes_per_token, growing_layers * per_layer * 2);
  EXPECT_EQ(engine->metrics().kv_local_blocks_total > 0,
            growing_layers < config.num_layers);
  expect_pool_back_to_full(*engine);
}

TEST_P(ExpertModelEngineTest, PreemptAndResumeGivesTheSameTokens) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  const ModelConfig& config = loaded.model->config();
  EngineOptions options;
  options.block_size = 16;
  // 12 blocks = 192 positions for 5 requests that grow to 45-80 tokens each.
  options.kv_cache_bytes =
      static_cast<int64_t>(PagedKvCache::block_bytes(config.num_layers, config.kv_size(), 16,
                                                     DType::kF16, config.kv_values_are_keys())) *
      12;
  options.max_batch_tokens = 64;
  options.enable_prefix_cache = false;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.model, 12);
  prompts.erase(prompts.begin(), prompts.begin() + 7);  // 17..45 tokens
  std::vector<EngineOutput> alone;
  for (const auto& prompt : prompts) alone.push_back(run_alone(*engine, greedy_request(prompt, 35)));
  EXPECT_EQ(engine->metrics().preemptions_total, 0u);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& prompt : prompts) streams.push_back(*engine->submit(greedy_request(prompt, 35)));
  for (size_t i = 0; i < streams.size(); ++i) {
    const EngineOutput together = streams[i]->wait_for_all();
    ASSERT_TRUE(together.status.ok()) << together.status.message();
    EXPECT_EQ(together.tokens, alone[i].tokens) << "request " << i;
  }
  EXPECT_GT(engine->metrics().preemptions_total, 0u);
  expect_pool_back_to_full(*engine);
}

INSTANTIATE_TEST_SUITE_P(Tiny, ExpertModelEngineTest,
                         ::testing::Values("deepseek_v3_groups", "deepseek_v2_lite",
                                           "kimi_k2_tiny", "mixtral_tiny", "qwen3_moe_tiny",
                                           "qwen2_moe_tiny", "gemma3_tiny", "gemma3_mqa_linear",
                                           "mistral_window"));

}  // namespace
}  // namespace tachyon
