// The serving engine's invariants on MoE, MLA and sliding-window models (tiny random
// DeepSeek-V3, DeepSeek-V2, Qwen3-MoE, Gemma 3 and Mistral shapes from tools/tiny_models.py,
// the windows of 5 to 12 positions shorter than most prompts): a request's tokens are the same
// alone or in a mixed batch of 16, from a prefix-cache hit or cold, preempted and resumed or
// not; every KV block comes back. And speculation with DeepSeek-V3's MTP layer leaves every
// output as it is without it (greedy and seeded sampling; alone, batched, preempted, after a
// prefix-cache hit), while it really drafts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "model_files/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/mtp_runner.h"
#include "runtime/snap_kv.h"
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
  // (All local, Mistral: nothing grows with the context.)
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
  bool all_local = config.has_local_layers();
  for (int layer = 0; layer < config.num_layers; ++layer) {
    all_local = all_local && config.layer_is_local(layer);
  }
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
  // (Mistral's layers all hold only their windows: its requests wait rather than run short.)
  if (!all_local) {
    EXPECT_GT(engine->metrics().preemptions_total, 0u);
  }
  expect_pool_back_to_full(*engine);
}

// Speculation with the model's MTP layer, always verifying 3 guesses (the adaptive sizing
// would verify none on slow machines: the tiny model's layer is cheap but not free).
std::unique_ptr<Engine> mtp_engine(LoadedModel& loaded, ThreadPool& pool, EngineOptions options,
                                   bool mtp) {
  if (mtp) {
    options.speculative.mode = SpeculativeMode::kMtp;
    options.speculative.max_draft_tokens = 3;
    options.speculative.adaptive = false;
  }
  return make_engine(loaded, pool, options);
}

EngineRequest sampled_request(std::vector<TokenId> prompt, int max_tokens, uint64_t seed) {
  EngineRequest request = greedy_request(std::move(prompt), max_tokens);
  request.sampling.temperature = 0.8f;
  request.sampling.top_p = 0.95f;
  request.sampling.frequency_penalty = 0.3f;
  request.sampling.seed = seed;
  return request;
}

uint64_t mtp_drafts(const Engine& engine) {
  return testing_util::settled_metrics(engine).draft_tokens_total[static_cast<int>(DraftSource::kMtp)];
}

TEST(MtpSpeculationTest, OutputsAreUnchangedAloneAndBatched) {
  LoadedModel loaded = load("deepseek_v3_groups");
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  options.max_batch_tokens = 64;
  options.speculative.max_sequences = 16;  // speculate in the batch too
  std::unique_ptr<Engine> off = mtp_engine(loaded, pool, options, false);
  std::unique_ptr<Engine> on = mtp_engine(loaded, pool, options, true);
  ASSERT_TRUE(off && on);
  const std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.model, 16);
  for (int i : {0, 5, 11}) {
    EXPECT_EQ(run_alone(*on, greedy_request(prompts[i], 30)).tokens,
              run_alone(*off, greedy_request(prompts[i], 30)).tokens) << "greedy " << i;
    EXPECT_EQ(run_alone(*on, sampled_request(prompts[i], 30, 40 + i)).tokens,
              run_alone(*off, sampled_request(prompts[i], 30, 40 + i)).tokens) << "seeded " << i;
  }
  EXPECT_GT(mtp_drafts(*on), 0u);
  // (One engine at a time: the two share the model, whose workspace one pass uses.)
  auto run_batch = [&](Engine& engine) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 16; ++i) {
      streams.push_back(*engine.submit(i % 2 ? sampled_request(prompts[i], 12 + i, i)
                                             : greedy_request(prompts[i], 12 + i)));
    }
    std::vector<EngineOutput> outputs;
    for (auto& stream : streams) outputs.push_back(stream->wait_for_all());
    return outputs;
  };
  const std::vector<EngineOutput> with = run_batch(*on);
  const std::vector<EngineOutput> without = run_batch(*off);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(with[i].status.ok()) << with[i].status.message();
    EXPECT_EQ(with[i].tokens, without[i].tokens) << "batched " << i;
  }
  expect_pool_back_to_full(*on);
}

TEST(MtpSpeculationTest, PrefixHitAndPreemptionAreUnchanged) {
  LoadedModel loaded = load("deepseek_v3_groups");
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  const ModelConfig& config = loaded.model->config();
  // A prefix-cache hit: the MTP layer starts where the trunk first computes the request.
  {
    EngineOptions options;
    options.kv_cache_bytes = 64 << 20;
    std::unique_ptr<Engine> on = mtp_engine(loaded, pool, options, true);
    std::unique_ptr<Engine> off = mtp_engine(loaded, pool, options, false);
    const std::vector<TokenId> prompt = make_prompts(*loaded.model, 7)[6];  // 45 tokens
    const EngineOutput expected = run_alone(*off, greedy_request(prompt, 25));
    EXPECT_EQ(run_alone(*on, greedy_request(prompt, 25)).tokens, expected.tokens);
    const EngineOutput warm = run_alone(*on, greedy_request(prompt, 25));
    EXPECT_EQ(warm.cached_prompt_tokens, 32);
    EXPECT_EQ(warm.tokens, expected.tokens);
    EXPECT_GT(warm.draft_tokens, 0);
  }
  // Preempted and resumed: the layer's entries start over where the trunk recomputes.
  EngineOptions options;
  options.block_size = 16;
  options.kv_cache_bytes =
      static_cast<int64_t>(PagedKvCache::block_bytes(config.num_layers, config.kv_size(), 16,
                                                     DType::kF16, config.kv_values_are_keys())) *
      12;
  options.max_batch_tokens = 64;
  options.enable_prefix_cache = false;
  options.speculative.max_sequences = 8;
  std::unique_ptr<Engine> on = mtp_engine(loaded, pool, options, true);
  std::unique_ptr<Engine> off = mtp_engine(loaded, pool, options, false);
  ASSERT_TRUE(on && off);
  std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.model, 12);
  prompts.erase(prompts.begin(), prompts.begin() + 7);
  auto run_all = [&](Engine& engine) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& prompt : prompts) streams.push_back(*engine.submit(greedy_request(prompt, 35)));
    std::vector<EngineOutput> outputs;
    for (auto& stream : streams) outputs.push_back(stream->wait_for_all());
    return outputs;
  };
  const std::vector<EngineOutput> with = run_all(*on);
  const std::vector<EngineOutput> without = run_all(*off);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(with[i].status.ok()) << with[i].status.message();
    EXPECT_EQ(with[i].tokens, without[i].tokens) << "request " << i;
  }
  EXPECT_GT(testing_util::settled_metrics(*on).preemptions_total, 0u);
  EXPECT_GT(mtp_drafts(*on), 0u);
  expect_pool_back_to_full(*on);
}

// The runner's bookkeeping (entries computed step by step, rows of rejected drafts ignored, a
// sequence met again after a gap started over) gives the same guesses as the MTP layer run from
// scratch over the sequence's whole history.
TEST(MtpSpeculationTest, RunnerGuessesEqualAFreshPass) {
  LoadedModel loaded = load("deepseek_v3_groups");
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  ThreadPool pool(2);
  const ModelConfig& config = model.config();
  const int64_t width = config.hidden_size;
  constexpr int kBlock = 16;
  // The trunk's final hidden states of a whole sequence, in one pass.
  auto trunk_hidden = [&](const std::vector<TokenId>& tokens) {
    Result<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::create(
        config.num_layers, config.num_kv_heads, config.head_size, 8, kBlock, DType::kF32,
        config.kv_values_are_keys());
    ForwardBatch batch;
    batch.block_size = kBlock;
    BatchSequence sequence;
    sequence.num_tokens = static_cast<int>(tokens.size());
    for (int b = 0; b < 8; ++b) sequence.block_table.push_back(b);
    batch.sequences.push_back(sequence);
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch.tokens.push_back(tokens[i]);
      batch.positions.push_back(static_cast<int>(i));
      batch.slots.push_back(static_cast<int64_t>(i));
    }
    batch.logits_tokens.push_back(static_cast<int>(tokens.size()) - 1);
    std::vector<float> logits, hidden;
    EXPECT_TRUE(model.forward_batch(batch, **cache, pool, logits, nullptr, &hidden).ok());
    return hidden;
  };
  // The guesses of the MTP layer run from scratch over entries base..len-2, then chained.
  auto fresh_guesses = [&](const std::vector<TokenId>& tokens, int base, int count) {
    const std::vector<float> hidden = trunk_hidden(tokens);
    Result<std::unique_ptr<PagedKvCache>> cache = model.make_mtp_cache(8, kBlock, DType::kF32);
    std::vector<TokenId> guesses;
    std::vector<float> input(hidden.begin() + base * width, hidden.end() - width);
    std::vector<TokenId> entry_tokens(tokens.begin() + base + 1, tokens.end());
    int first = base;
    int start_slot = 0;
    for (int g = 0; g < count; ++g) {
      ForwardBatch batch;
      batch.block_size = kBlock;
      BatchSequence sequence;
      sequence.num_tokens = static_cast<int>(entry_tokens.size());
      sequence.start_position = start_slot;
      for (int b = 0; b < 8; ++b) sequence.block_table.push_back(b);
      batch.sequences.push_back(sequence);
      for (size_t i = 0; i < entry_tokens.size(); ++i) {
        batch.tokens.push_back(entry_tokens[i]);
        batch.positions.push_back(first + static_cast<int>(i));
        batch.slots.push_back(start_slot + static_cast<int64_t>(i));
      }
      batch.logits_tokens.push_back(static_cast<int>(entry_tokens.size()) - 1);
      std::vector<float> logits, out_hidden;
      EXPECT_TRUE(model.forward_mtp_batch(0, batch, input.data(), **cache, pool, logits,
                                          &out_hidden).ok());
      guesses.push_back(static_cast<TokenId>(
          std::max_element(logits.begin(), logits.end()) - logits.begin()));
      start_slot += static_cast<int>(entry_tokens.size());
      first += static_cast<int>(entry_tokens.size());
      entry_tokens = {guesses.back()};
      input = out_hidden;
    }
    return guesses;
  };
  Result<std::unique_ptr<MtpRunner>> runner = MtpRunner::create(model, pool, 16, kBlock, DType::kF32);
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  std::vector<TokenId> tokens = make_prompts(model, 4)[3];  // 24 tokens
  const int prompt = static_cast<int>(tokens.size());
  tokens.push_back(5);  // the prompt's sampled token
  // Each step: (first position the trunk computed, rows it computed, accepted tokens after).
  struct Step {
    int first;
    int rows;
    std::vector<TokenId> appended;  // tokens known after the step (accepted drafts + sample)
  };
  const std::vector<Step> steps = {
      {0, prompt, {}},            // the prompt
      {prompt, 3, {9, 11}},       // a token and 2 drafts: the first accepted, then a sample
      {prompt + 2, 4, {7}},       // 3 drafts all rejected: a sample
      {prompt + 3, 1, {100}},     // a plain decode
      {prompt + 10, 2, {}},       // a gap (as after a prefix the trunk skipped): starts over
  };
  std::vector<TokenId> out;
  int compared = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const Step& step = steps[s];
    tokens.insert(tokens.end(), step.appended.begin(), step.appended.end());
    if (step.first + 1 > static_cast<int>(tokens.size())) tokens.resize(step.first + 2, 3);
    // The trunk's rows: of the final tokens, padded with rows for rejected drafts.
    std::vector<TokenId> computed = tokens;
    computed.resize(std::max<size_t>(tokens.size(), step.first + step.rows), 42);
    const std::vector<float> hidden = trunk_hidden(computed);
    std::vector<MtpRunner::Job> jobs = {{1, tokens, step.first, hidden.data() + step.first * width,
                                         step.rows, 2, &out}};
    ASSERT_TRUE((*runner)->advance(jobs, 2).ok());
    const int base = s == 4 ? step.first : 0;
    const int count = std::min<int>(step.rows, static_cast<int>(tokens.size()) - 1 - step.first);
    if (count <= 0 || step.first + count != static_cast<int>(tokens.size()) - 1) continue;
    EXPECT_EQ(out, fresh_guesses(tokens, base, 2));
    ++compared;
  }
  EXPECT_EQ(compared, 5);
}

// The single-sequence Generator (generate, chat, bench's copy rows) with the MTP layer: the
// same tokens as without, greedy and seeded, a follow-up turn on the cached conversation too.
TEST(MtpSpeculationTest, GeneratorOutputsAreUnchanged) {
  LoadedModel loaded = load("deepseek_v3_groups");
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  Generator plain(*loaded.model, *loaded.tokenizer, pool, 128);
  Generator speculative(*loaded.model, *loaded.tokenizer, pool, 128);
  SpeculativeOptions options;
  options.mode = SpeculativeMode::kMtp;
  options.max_draft_tokens = 3;
  options.adaptive = false;
  ASSERT_TRUE(speculative.set_speculation(options, nullptr).ok());
  int drafted = 0;
  const std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.model, 8);
  for (size_t i = 2; i < prompts.size(); ++i) {
    SamplingParams params;
    params.max_tokens = 30;
    params.ignore_eos = true;
    if (i % 2) {
      params.temperature = 0.8f;
      params.top_p = 0.95f;
      params.seed = i;
    } else {
      params.temperature = 0;
    }
    Result<GenerationOutput> expected = plain.generate(prompts[i], params, [](std::string_view) {});
    Result<GenerationOutput> actual = speculative.generate(prompts[i], params, [](std::string_view) {});
    ASSERT_TRUE(expected.ok() && actual.ok()) << actual.status().message();
    EXPECT_EQ(actual->tokens, expected->tokens) << "prompt " << i;
    drafted += actual->draft_tokens;
    std::vector<TokenId> follow_up = prompts[i];
    follow_up.insert(follow_up.end(), actual->tokens.begin(), actual->tokens.end());
    follow_up.push_back(prompts[i][0]);
    params.max_tokens = 8;
    Result<GenerationOutput> next_expected = plain.generate(follow_up, params, [](std::string_view) {});
    Result<GenerationOutput> next = speculative.generate(follow_up, params, [](std::string_view) {});
    ASSERT_TRUE(next_expected.ok() && next.ok());
    EXPECT_EQ(next->tokens, next_expected->tokens) << "follow-up " << i;
    EXPECT_GT(next->cached_prompt_tokens, 0);
  }
  EXPECT_GT(drafted, 0);
}

TEST(MtpSpeculationTest, ModelsWithoutMtpAreRefused) {
  LoadedModel loaded = load("deepseek_v2_lite");
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 16 << 20;
  options.speculative.mode = SpeculativeMode::kMtp;
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*loaded.model, *loaded.tokenizer, pool, options, DraftModelRef());
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("multi-token prediction"), std::string::npos)
      << engine.status().message();
}

// Greedy tokens of StreamingLLM on one contiguous cache of `context` positions: when it is
// full, `chunk` tokens after the first `sink` are dropped and the rest's keys turned back by
// `chunk` positions with each layer's own RoPE (what the engine's and the generator's sink
// policies do with their blocks).
std::vector<TokenId> contiguous_sink_tokens(DecoderModel& model, ThreadPool& pool,
                                            const std::vector<TokenId>& prompt, int count,
                                            int context, int sink, int chunk) {
  KvCache cache = model.make_cache(context, DType::kF16);
  std::vector<float> logits;
  std::vector<TokenId> tokens;
  EXPECT_TRUE(model.forward(prompt, 0, cache, pool, 1, logits).ok());
  int length = static_cast<int>(prompt.size());
  const int vocab = model.config().vocab_size;
  for (int t = 0; t < count; ++t) {
    const TokenId next = static_cast<TokenId>(
        std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
    tokens.push_back(next);
    if (t + 1 == count) break;
    if (length + 1 > context) {
      cache.drop_positions(sink, chunk, length, [&](float* keys, int n, int layer) {
        model.shift_keys(keys, n, chunk, layer);
      });
      length -= chunk;
    }
    const std::vector<TokenId> one = {next};
    EXPECT_TRUE(model.forward(one, length, cache, pool, 1, logits).ok());
    ++length;
  }
  return tokens;
}

// The sink policy on sliding-window models: each layer's keys turn back with its own RoPE
// (Gemma 3's local layers have base 1e4, its global one 1e6 or linear scaling); with local and
// global layers the local pool's blocks move with the global ones, and the sink's local block
// stays, for a small context brings the sink back into a local layer's window after a drop
// (window 12, context 16: a query at position 12 sees positions 1..12 again). The engine's
// tokens are the contiguous cache's, alone and beside copies sharing its blocks; the
// generator's too; every block comes back.
class SlidingWindowCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SlidingWindowCacheTest, SinkMovesEveryLayerWithItsOwnRope) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  ThreadPool pool(2);
  const std::vector<std::vector<TokenId>> prompts = make_prompts(model, 8);
  struct Shape {
    int block_size, context, prompt;
  };
  for (const Shape shape : {Shape{16, 96, 6}, Shape{4, 16, 1}}) {
    SCOPED_TRACE(::testing::Message() << "blocks of " << shape.block_size << ", context "
                                      << shape.context);
    EngineOptions options;
    options.kv_cache_type = DType::kF16;
    options.kv_cache_bytes = 16 << 20;
    options.block_size = shape.block_size;
    options.max_context = shape.context;
    options.max_batch_tokens = 64;
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    const std::vector<TokenId>& prompt = prompts[shape.prompt];
    ASSERT_LT(static_cast<int>(prompt.size()), shape.context * 3 / 4);
    EngineRequest sink = greedy_request(prompt, 120);
    sink.sink = true;
    const EngineOutput alone = run_alone(*engine, sink);
    ASSERT_TRUE(alone.status.ok()) << alone.status.message();
    ASSERT_EQ(alone.completion_tokens, 120);
    EXPECT_GE(alone.dropped_tokens, 120 - shape.context);
    const int chunk = std::max(shape.block_size, (shape.context - shape.block_size) / 8 /
                                                     shape.block_size * shape.block_size);
    const std::vector<TokenId> expected = contiguous_sink_tokens(
        model, pool, prompt, 120, shape.context, shape.block_size, chunk);
    int same = 0;
    while (same < 120 && expected[same] == alone.tokens[same]) ++same;
    EXPECT_EQ(same, 120) << "the engine and the contiguous cache part after token " << same;

    // Two more copies (sharing its prompt's blocks, copied before they move) and a plain one.
    const std::vector<TokenId> plain(
        prompts[2].begin(),
        prompts[2].begin() + std::min<int>(prompts[2].size(), shape.context / 2));
    const std::vector<EngineOutput> outputs =
        testing_util::run_together(*engine, {sink, sink, greedy_request(plain, 8)});
    ASSERT_EQ(outputs.size(), 3u);
    EXPECT_EQ(outputs[0].tokens, alone.tokens);
    EXPECT_EQ(outputs[1].tokens, alone.tokens);
    EXPECT_EQ(outputs[2].completion_tokens, 8);
    expect_pool_back_to_full(*engine);
  }

  // The generator (generate, chat): its sink of Generator::kSinkTokens on a contiguous cache.
  const int context = 64;
  Generator generator(model, *loaded.tokenizer, pool, context);
  generator.set_sink(true);
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 150;
  params.ignore_eos = true;
  Result<GenerationOutput> generated =
      generator.generate(prompts[5], params, [](std::string_view) {});
  ASSERT_TRUE(generated.ok()) << generated.status().message();
  EXPECT_GT(generated->dropped_tokens, 0);
  const int chunk = std::max(16, (context - Generator::kSinkTokens) / 8);
  EXPECT_EQ(generated->tokens, contiguous_sink_tokens(model, pool, prompts[5], 150, context,
                                                      Generator::kSinkTokens, chunk));
}

// The disk tier on sliding-window models: a file holds a block's global and local layers;
// after a restart a prompt longer than the window is read back (every global block, the local
// blocks of the last window) with the cold run's tokens; files with a flipped byte are
// recomputed, with the same tokens again.
TEST_P(SlidingWindowCacheTest, DiskTierSurvivesARestart) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  const std::string directory = testing::TempDir() + "sliding_window_kv_disk_" + GetParam();
  std::filesystem::remove_all(directory);
  EngineOptions options;
  options.kv_cache_type = DType::kF16;
  options.kv_cache_bytes = 16 << 20;
  options.block_size = 4;  // windows of 5..12 positions span several blocks
  options.kv_disk_directory = directory;
  options.kv_disk_bytes = 64 << 20;
  options.model_fingerprint.fill(3);
  const std::vector<TokenId> prompt = make_prompts(*loaded.model, 7)[6];  // 45 tokens
  const int full_blocks = (static_cast<int>(prompt.size()) - 1) / 4 * 4;
  // Greedy tokens with their logprobs: a wrong local block shows in the digits even where a
  // tiny random model's argmax does not move.
  auto request = [&] {
    EngineRequest greedy = greedy_request(prompt, 24);
    greedy.sampling.logprobs = true;
    return greedy;
  };
  auto logprobs = [](const EngineOutput& output) {
    std::vector<float> values;
    for (const SampleLogprobs& sample : output.logprobs) values.push_back(sample.chosen.logprob);
    return values;
  };
  EngineOutput cold;
  {
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    cold = run_alone(*engine, request());
    ASSERT_TRUE(cold.status.ok()) << cold.status.message();
    EXPECT_EQ(cold.cached_prompt_tokens, 0);
  }
  {
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    const EngineOutput warm = run_alone(*engine, request());
    EXPECT_EQ(warm.cached_prompt_tokens, full_blocks);
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_EQ(logprobs(warm), logprobs(cold));
    EXPECT_EQ(testing_util::settled_metrics(*engine).prefix_cache_disk_tokens_total,
              static_cast<uint64_t>(full_blocks));
    expect_pool_back_to_full(*engine);
  }
  int flipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() != ".kvb") continue;
    std::fstream file(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff last = static_cast<std::streamoff>(entry.file_size()) - 1;
    file.seekg(last);
    const char byte = static_cast<char>(file.get() ^ 0x5a);
    file.seekp(last);
    file.put(byte);
    ++flipped;
  }
  EXPECT_GE(flipped, full_blocks / 4);
  {
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    const EngineOutput again = run_alone(*engine, request());
    EXPECT_EQ(again.cached_prompt_tokens, 0);
    EXPECT_EQ(again.tokens, cold.tokens);
    EXPECT_EQ(logprobs(again), logprobs(cold));
    expect_pool_back_to_full(*engine);
  }
  std::filesystem::remove_all(directory);
}

// SnapKV on sliding-window models: the global layers keep what the window tokens attend to,
// the local ones their recent positions. The engine's tokens are those of the same compaction
// on a contiguous cache; on Mistral (every layer local) SnapKV changes nothing at all.
TEST_P(SlidingWindowCacheTest, SnapKvKeepsTheLocalLayersWindows) {
  LoadedModel loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  ThreadPool pool(2);
  constexpr int kBudget = 64, kLength = 100, kNew = 20, kChunk = 48;
  std::vector<TokenId> prompt;
  for (const std::vector<TokenId>& part : make_prompts(model, 16)) {
    prompt.insert(prompt.end(), part.begin(), part.end());
  }
  prompt.resize(kLength);
  EngineOptions options;
  options.kv_cache_type = DType::kF16;
  options.kv_cache_bytes = 16 << 20;
  options.max_batch_tokens = kChunk;
  options.snapkv_budget = kBudget;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  EngineRequest request = greedy_request(prompt, kNew);
  request.sampling.logprobs = true;
  const EngineOutput compacted = run_alone(*engine, request);
  ASSERT_TRUE(compacted.status.ok()) << compacted.status.message();
  const EngineMetrics metrics = testing_util::settled_metrics(*engine);
  EXPECT_EQ(metrics.snapkv_compactions_total, 1u);
  EXPECT_EQ(metrics.snapkv_evicted_tokens_total, static_cast<uint64_t>(kLength - kBudget));
  expect_pool_back_to_full(*engine);

  // The contiguous reference: the prompt in the engine's chunks (the observation window spans
  // the last two), observed, then compacted; the local layers keep their recent positions.
  KeptPositions kept;
  EXPECT_EQ(compacted.tokens,
            testing_util::contiguous_snapkv_tokens(model, pool, DType::kF16, prompt, kBudget,
                                                   kChunk, kNew, &kept));
  for (int layer = 0; layer < model.config().num_layers; ++layer) {
    if (!model.config().layer_is_local(layer)) continue;
    std::vector<int> recent(kBudget);
    std::iota(recent.begin(), recent.end(), kLength - kBudget);
    EXPECT_EQ(kept[layer][0], recent) << "local layer " << layer;
  }

  if (GetParam() == "mistral_window") {  // every layer local: exactly the uncompacted run
    EngineOptions plain_options = options;
    plain_options.snapkv_budget = 0;
    std::unique_ptr<Engine> plain = make_engine(loaded, pool, plain_options);
    ASSERT_TRUE(plain);
    const EngineOutput full = run_alone(*plain, request);
    EXPECT_EQ(full.tokens, compacted.tokens);
    ASSERT_EQ(full.logprobs.size(), compacted.logprobs.size());
    for (size_t i = 0; i < full.logprobs.size(); ++i) {
      EXPECT_NEAR(full.logprobs[i].chosen.logprob, compacted.logprobs[i].chosen.logprob, 1e-4);
    }
  }

  // A budget below the window would cut into it: refused.
  ModelConfig wide = model.config();
  wide.sliding_window = 100;
  const Status refused = check_snapkv_budget(wide, 80);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("sliding window of 100"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SlidingWindowCacheTest,
                         ::testing::Values("gemma3_tiny", "gemma3_mqa_linear", "mistral_window"));

INSTANTIATE_TEST_SUITE_P(Tiny, ExpertModelEngineTest,
                         ::testing::Values("deepseek_v3_groups", "deepseek_v2_lite",
                                           "kimi_k2_tiny", "mixtral_tiny", "qwen3_moe_tiny",
                                           "qwen2_moe_tiny", "gemma3_tiny", "gemma3_mqa_linear",
                                           "mistral_window"));

}  // namespace
}  // namespace tachyon
