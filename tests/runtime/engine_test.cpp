// The serving engine's invariants on real models: batch invariance, prefix-cache hits and
// preemption that never change a request's tokens, no leaked KV blocks, and clean errors.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include "core/paths.h"
#include "kv_cache/kv_cache_type.h"
#include "kv_cache/paged_kv_cache.h"
#include "model_files/gguf_file.h"
#include "runtime/generator.h"
#include "runtime/snap_kv.h"
#include "engine_test_util.h"

namespace tachyon {
namespace {

using testing_util::expect_pool_back_to_full;
using testing_util::greedy_request;
using testing_util::make_engine;
using testing_util::run_alone;
using testing_util::run_together;
using testing_util::settled_metrics;

const std::string kTinyModel = std::string(TACHYON_TINY_MODELS) + "/llama_gqa.f32.gguf";

using testing_util::LoadedModel;

LoadedModel load(const std::string& path) { return testing_util::load_model(path); }

// The default model (SmolLM2-135M, Q4_1), loaded once for the whole file.
LoadedModel& default_model() {
  static LoadedModel loaded = load(default_model_path());
  return loaded;
}

// Prompts of different lengths from a text, so a batch mixes long prefills and short decodes.
std::vector<std::vector<TokenId>> make_prompts(const Tokenizer& tokenizer, int count) {
  static const char* const kTexts[] = {
      "The quick brown fox jumps over the lazy dog.",
      "Once upon a time, in a land far away, there lived a king who had three daughters. The "
      "youngest was the fairest of them all, and every morning she walked to the well.",
      "def fibonacci(n):\n    if n < 2:\n        return n\n",
      "Water boils at",
      "In 1969, the first humans landed on the Moon. The mission, called Apollo 11, was "
      "commanded by Neil Armstrong, and the lunar module pilot was Buzz Aldrin. Michael "
      "Collins stayed in orbit aboard the command module Columbia while",
      "List three colors:",
      "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer",
      "SELECT name FROM users WHERE",
  };
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < count; ++i) {
    std::string text = kTexts[i % 8];
    if (i >= 8) text = "Question " + std::to_string(i) + ": " + text;
    prompts.push_back(tokenizer.encode(text, {.parse_special = true, .add_special = true}));
  }
  return prompts;
}

// A KV cache type the model's heads do not fit (q8 needs multiples of 32 values; the tiny
// model's heads hold 16) is an error from Engine::create, not a crash.
TEST(EngineTest, RefusesAKvCacheTypeTheHeadsDoNotFit) {
  LoadedModel loaded = load(kTinyModel);
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(1);
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  options.kv_cache_type = DType::kQ8_0;
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(engine.status().message().find("this model's hold 16"), std::string::npos)
      << engine.status().message();
}

// The paged batch path computes what the single-sequence path computes, on a tiny f32 model
// with an f32 cache (the two attention implementations differ only in rounding).
TEST(EngineTest, MatchesTheSingleSequenceGenerator) {
  LoadedModel loaded = load(kTinyModel);
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  options.kv_cache_type = DType::kF32;
  options.max_batch_tokens = 7;  // chunked prefill with odd chunk sizes
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  for (const std::vector<TokenId>& prompt : make_prompts(*loaded.tokenizer, 4)) {
    const EngineOutput served = run_alone(*engine, greedy_request(prompt, 24));
    ASSERT_TRUE(served.status.ok()) << served.status.message();
    // The tiny model's context is short: both stop when it is full.
    Generator generator(*loaded.model, *loaded.tokenizer, pool, engine->max_context(), 512,
                        DType::kF32);
    SamplingParams params = greedy_request({}, 24).sampling;
    Result<GenerationOutput> expected = generator.generate(prompt, params, [](std::string_view) {});
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(served.tokens, expected->tokens);
    // The engine also ends with an unfinished character's U+FFFD, as a full decode would.
    EXPECT_EQ(served.text.substr(0, expected->text.size()), expected->text);
    EXPECT_EQ(served.finish_reason, expected->finish_reason);
    EXPECT_EQ(served.completion_tokens, static_cast<int>(expected->tokens.size()));
    EXPECT_EQ(served.prompt_tokens, static_cast<int>(prompt.size()));
  }
  expect_pool_back_to_full(*engine);
}

// A client that reads the metrics as soon as its request finished sees it neither running nor
// waiting (the gauges drop before the last output is delivered).
TEST(EngineTest, FinishedRequestLeavesTheGaugesBeforeItsLastOutput) {
  LoadedModel loaded = load(kTinyModel);
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  for (const std::vector<TokenId>& prompt : make_prompts(*loaded.tokenizer, 3)) {
    const EngineOutput served = run_alone(*engine, greedy_request(prompt, 5));
    ASSERT_TRUE(served.status.ok()) << served.status.message();
    const EngineMetrics metrics = engine->metrics();  // no waiting for the next step
    EXPECT_EQ(metrics.num_running, 0);
    EXPECT_EQ(metrics.num_waiting, 0);
  }
}

// The tests below hold for each KV cache type: f16, and q8 read in place by the attention
// kernels for decode tokens and widened for prompt chunks.
class EngineCacheTypeTest : public testing::TestWithParam<DType> {};

// A request's greedy tokens are the same alone and inside a batch of 16 mixed requests (long
// prompts being prefilled in chunks while others decode).
TEST_P(EngineCacheTypeTest, BatchInvariance) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_type = GetParam();
  options.kv_cache_bytes = 256 << 20;
  options.max_batch_tokens = 64;
  options.enable_prefix_cache = false;  // every run computes everything
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.tokenizer, 16);
  std::vector<std::vector<TokenId>> alone;
  for (int i : {0, 4, 9}) alone.push_back(run_alone(*engine, greedy_request(prompts[i], 26)).tokens);

  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    Result<std::shared_ptr<RequestStream>> stream =
        engine->submit(greedy_request(prompts[i], 8 + 2 * i));
    ASSERT_TRUE(stream.ok());
    streams.push_back(*stream);
  }
  std::vector<EngineOutput> batched;
  for (auto& stream : streams) batched.push_back(stream->wait_for_all());
  EXPECT_EQ(batched[0].tokens, std::vector<TokenId>(alone[0].begin(), alone[0].begin() + 8));
  EXPECT_EQ(batched[4].tokens, std::vector<TokenId>(alone[1].begin(), alone[1].begin() + 16));
  EXPECT_EQ(batched[9].tokens, alone[2]);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(batched[i].completion_tokens, 8 + 2 * i);
  EXPECT_GT(engine->metrics().steps_total, 0u);
  expect_pool_back_to_full(*engine);
}

// A prompt whose start is cached reuses those blocks and gives the same tokens as a cold run;
// a different cache salt does not share them.
TEST_P(EngineCacheTypeTest, PrefixCacheHitGivesTheSameTokens) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_type = GetParam();
  options.kv_cache_bytes = 64 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  std::vector<TokenId> prompt = make_prompts(*loaded.tokenizer, 8)[4];  // ~60 tokens
  const EngineOutput cold = run_alone(*engine, greedy_request(prompt, 16));
  EXPECT_EQ(cold.cached_prompt_tokens, 0);
  const EngineOutput warm = run_alone(*engine, greedy_request(prompt, 16));
  EXPECT_EQ(warm.cached_prompt_tokens, (static_cast<int>(prompt.size()) - 1) / 16 * 16);
  EXPECT_GT(warm.cached_prompt_tokens, 0);
  EXPECT_EQ(warm.tokens, cold.tokens);

  // The follow-up turn of a chat: prompt + answer + more; the whole earlier part is cached.
  std::vector<TokenId> longer = prompt;
  longer.insert(longer.end(), cold.tokens.begin(), cold.tokens.end());
  for (TokenId token : loaded.tokenizer->encode(" And then")) longer.push_back(token);
  const EngineOutput follow_up = run_alone(*engine, greedy_request(longer, 12));
  EXPECT_GE(follow_up.cached_prompt_tokens, static_cast<int>(prompt.size()) / 16 * 16);

  EngineRequest salted = greedy_request(prompt, 16);
  salted.cache_salt = "tenant-b";
  const EngineOutput other_tenant = run_alone(*engine, salted);
  EXPECT_EQ(other_tenant.cached_prompt_tokens, 0);
  EXPECT_EQ(other_tenant.tokens, cold.tokens);
  const EngineMetrics metrics = settled_metrics(*engine);
  EXPECT_GT(metrics.prefix_cache_hit_tokens_total, 0u);
  EXPECT_GT(metrics.kv_blocks_cached, 0);
  expect_pool_back_to_full(*engine);
}

// The disk tier: a prompt computed by one engine is read back by the next one on the same
// directory (a restart) and gives the same tokens as a cold run; a wrong fingerprint reads
// nothing; blocks evicted from a small RAM pool come back from disk within one engine.
TEST_P(EngineCacheTypeTest, DiskTierSurvivesARestartWithTheSameTokens) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  const std::string directory = testing::TempDir() + "engine_test_kv_disk_" +
                                std::string(kv_cache_type_name(GetParam()));
  std::filesystem::remove_all(directory);
  EngineOptions options;
  options.kv_cache_type = GetParam();
  options.kv_cache_bytes = 64 << 20;
  options.kv_disk_directory = directory;
  options.kv_disk_bytes = 256 << 20;
  options.model_fingerprint.fill(7);
  const std::vector<TokenId> prompt = make_prompts(*loaded.tokenizer, 8)[4];  // ~60 tokens
  const int full_blocks = (static_cast<int>(prompt.size()) - 1) / 16 * 16;
  EngineOutput cold;
  {
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    cold = run_alone(*engine, greedy_request(prompt, 16));
    EXPECT_EQ(cold.cached_prompt_tokens, 0);
  }  // written before the engine is gone
  {
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    ASSERT_TRUE(engine);
    EXPECT_GE(engine->metrics().kv_disk.files, (static_cast<int>(prompt.size()) + 16) / 16 - 1);
    const EngineOutput warm = run_alone(*engine, greedy_request(prompt, 16));
    EXPECT_EQ(warm.cached_prompt_tokens, full_blocks);
    EXPECT_EQ(warm.tokens, cold.tokens);
    const EngineMetrics metrics = settled_metrics(*engine);
    EXPECT_EQ(metrics.prefix_cache_disk_tokens_total, static_cast<uint64_t>(full_blocks));
    EXPECT_EQ(metrics.kv_disk.blocks_loaded, static_cast<uint64_t>(full_blocks / 16));
    expect_pool_back_to_full(*engine);
  }
  {
    EngineOptions other = options;
    other.model_fingerprint.fill(8);  // another model: nothing is shared
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, other);
    ASSERT_TRUE(engine);
    const EngineOutput fresh = run_alone(*engine, greedy_request(prompt, 16));
    EXPECT_EQ(fresh.cached_prompt_tokens, 0);
    EXPECT_EQ(fresh.tokens, cold.tokens);
  }
  {
    // RAM holds only a few blocks: a second prompt evicts the first one's, which then come
    // back from disk.
    const ModelConfig& config = loaded.model->config();
    EngineOptions small = options;
    small.kv_cache_bytes = static_cast<int64_t>(PagedKvCache::block_bytes(
                               config.num_layers, config.kv_size(), small.block_size,
                               small.kv_cache_type, config.kv_values_are_keys())) *
                           12;
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, small);
    ASSERT_TRUE(engine);
    EXPECT_EQ(run_alone(*engine, greedy_request(prompt, 16)).tokens, cold.tokens);
    const uint64_t disk_tokens = settled_metrics(*engine).prefix_cache_disk_tokens_total;
    EXPECT_EQ(disk_tokens, static_cast<uint64_t>(full_blocks));
    const std::vector<TokenId> other = make_prompts(*loaded.tokenizer, 8)[1];
    const EngineOutput other_cold = run_alone(*engine, greedy_request(other, 120));
    const EngineOutput warm = run_alone(*engine, greedy_request(prompt, 16));
    EXPECT_EQ(warm.cached_prompt_tokens, full_blocks);
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_GT(settled_metrics(*engine).prefix_cache_disk_tokens_total, disk_tokens);
    EXPECT_EQ(run_alone(*engine, greedy_request(other, 120)).tokens, other_cold.tokens);
  }
  std::filesystem::remove_all(directory);
}

// Bad disk-tier options are errors from Engine::create.
TEST(EngineTest, DiskTierNeedsThePrefixCacheAndAFingerprint) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 16 << 20;
  options.kv_disk_directory = testing::TempDir() + "engine_test_kv_disk_errors";
  auto no_fingerprint = Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  ASSERT_FALSE(no_fingerprint.ok());
  EXPECT_NE(no_fingerprint.status().message().find("fingerprint"), std::string::npos);
  options.model_fingerprint.fill(1);
  options.enable_prefix_cache = false;
  auto no_prefix_cache = Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  ASSERT_FALSE(no_prefix_cache.ok());
  EXPECT_NE(no_prefix_cache.status().message().find("prefix cache"), std::string::npos);
  options.enable_prefix_cache = true;
  auto engine = Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  // One engine per directory.
  auto second = Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  engine->reset();
  std::filesystem::remove_all(options.kv_disk_directory);
}

// The sink policy: a request runs on past the context; until its first drop its tokens are
// those of the same request without it; with drops it gives the same tokens alone and in a
// batch (sharing its prompt's blocks with others, so the shared ones are copied before they
// move); it never holds more than one context of blocks, and a too long prompt is cut.
TEST_P(EngineCacheTypeTest, SinkRunsPastTheContextTheSameAloneAndBatched) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_type = GetParam();
  options.kv_cache_bytes = 64 << 20;
  options.max_context = 96;
  options.max_batch_tokens = 64;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const std::vector<TokenId> prompt = make_prompts(*loaded.tokenizer, 8)[4];  // ~60 tokens
  const int room = 96 - static_cast<int>(prompt.size());
  const EngineOutput plain = run_alone(*engine, greedy_request(prompt, room));
  EngineRequest sink = greedy_request(prompt, 300);
  sink.sink = true;
  const EngineOutput alone = run_alone(*engine, sink);
  ASSERT_TRUE(alone.status.ok()) << alone.status.message();
  EXPECT_EQ(alone.completion_tokens, 300);
  EXPECT_EQ(std::vector<TokenId>(alone.tokens.begin(), alone.tokens.begin() + room), plain.tokens);
  EXPECT_GE(alone.dropped_tokens, 300 - room);

  // The same tokens from one contiguous cache handled as StreamingLLM does (drop 16 tokens
  // after the first 16 when the 96 positions are full, turn the rest's keys back): the paged
  // moves are those moves.
  {
    DecoderModel& model = *loaded.model;
    KvCache cache = model.make_cache(96, GetParam());
    std::vector<float> logits;
    std::vector<TokenId> expected;
    ASSERT_TRUE(model.forward(prompt, 0, cache, pool, 1, logits).ok());
    int length = static_cast<int>(prompt.size());
    const int vocab = model.config().vocab_size;
    for (int t = 0; t < 300; ++t) {
      const TokenId next =
          static_cast<TokenId>(std::max_element(logits.begin(), logits.begin() + vocab) -
                               logits.begin());
      expected.push_back(next);
      if (t == 299) break;
      if (length + 1 > 96) {
        cache.drop_positions(16, 16, length, [&](float* keys, int n, int layer) {
          model.shift_keys(keys, n, 16, layer);
        });
        length -= 16;
      }
      const std::vector<TokenId> one = {next};
      ASSERT_TRUE(model.forward(one, length, cache, pool, 1, logits).ok());
      ++length;
    }
    int same = 0;
    while (same < 300 && expected[same] == alone.tokens[same]) ++same;
    EXPECT_EQ(same, 300) << "the engine and the contiguous cache part after token " << same;
  }

  // The same with others around: two more sink copies (sharing its blocks) and a plain one.
  const std::vector<EngineOutput> outputs = run_together(
      *engine, {sink, sink, greedy_request(make_prompts(*loaded.tokenizer, 8)[1], 20)});
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0].tokens, alone.tokens);
  EXPECT_EQ(outputs[1].tokens, alone.tokens);
  EXPECT_EQ(outputs[2].completion_tokens, 20);

  // A prompt longer than the context: cut, answered.
  std::vector<TokenId> long_prompt;
  for (const std::vector<TokenId>& part : make_prompts(*loaded.tokenizer, 8)) {
    long_prompt.insert(long_prompt.end(), part.begin(), part.end());
  }
  ASSERT_GT(long_prompt.size(), 96u);
  EXPECT_FALSE(engine->submit(greedy_request(long_prompt, 8)).ok());  // without sink: too long
  EngineRequest long_sink = greedy_request(long_prompt, 8);
  long_sink.sink = true;
  const EngineOutput cut = run_alone(*engine, long_sink);
  ASSERT_TRUE(cut.status.ok()) << cut.status.message();
  EXPECT_EQ(cut.completion_tokens, 8);
  EXPECT_EQ(cut.prompt_tokens, static_cast<int>(long_prompt.size()));
  EXPECT_GE(cut.dropped_tokens, static_cast<int>(long_prompt.size()) - 96);
  expect_pool_back_to_full(*engine);
}

// SnapKV in the engine: a prompt longer than the budget is compacted once computed, into
// fresh blocks; its tokens are those of the same compaction on a contiguous cache; its own
// blocks go back to the prefix cache unchanged, and prompts that share them are not compacted
// (their tokens are an engine's without SnapKV).
TEST_P(EngineCacheTypeTest, SnapKvCompactsLongPromptsAsTheContiguousCacheDoes) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  DecoderModel& model = *loaded.model;
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_type = GetParam();
  options.kv_cache_bytes = 128 << 20;
  options.max_batch_tokens = 256;
  options.snapkv_budget = 128;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  std::vector<TokenId> prompt;
  const std::vector<std::vector<TokenId>> parts = make_prompts(*loaded.tokenizer, 16);
  for (int i = 0; prompt.size() < 300; ++i) {
    prompt.insert(prompt.end(), parts[i % 16].begin(), parts[i % 16].end());
  }
  prompt.resize(300);
  const EngineOutput alone = run_alone(*engine, greedy_request(prompt, 24));
  EngineMetrics metrics = settled_metrics(*engine);
  EXPECT_EQ(metrics.snapkv_compactions_total, 1u);
  EXPECT_EQ(metrics.snapkv_evicted_tokens_total, 300u - 128u);

  // The contiguous reference: the prompt in the engine's chunks.
  EXPECT_EQ(alone.tokens, testing_util::contiguous_snapkv_tokens(model, pool, GetParam(), prompt,
                                                                 128, 256, 24));

  // Its blocks went back to the prefix cache unchanged: the same prompt again, and a shorter
  // one sharing its start, find them there and, their prefix shared, are not compacted;
  // beside them another long prompt is.
  std::vector<TokenId> other;
  for (int i = 5; other.size() < 300; ++i) {
    other.insert(other.end(), parts[i % 16].begin(), parts[i % 16].end());
  }
  other.resize(300);
  std::vector<std::shared_ptr<RequestStream>> streams;
  const std::vector<TokenId> sibling(prompt.begin(), prompt.begin() + 200);
  for (const std::vector<TokenId>& tokens : {prompt, sibling, other}) {
    Result<std::shared_ptr<RequestStream>> stream = engine->submit(greedy_request(tokens, 24));
    ASSERT_TRUE(stream.ok());
    streams.push_back(*stream);
  }
  const EngineOutput again = streams[0]->wait_for_all();
  const EngineOutput sibling_out = streams[1]->wait_for_all();
  const EngineOutput other_out = streams[2]->wait_for_all();
  EXPECT_EQ(again.cached_prompt_tokens, 288);
  EXPECT_EQ(sibling_out.cached_prompt_tokens, 192);
  EXPECT_EQ(again.tokens.front(), alone.tokens.front());
  EXPECT_EQ(other_out.completion_tokens, 24);
  metrics = settled_metrics(*engine);
  EXPECT_EQ(metrics.snapkv_compactions_total, 2u);
  // Uncompacted, the repeated prompt gives what an engine without SnapKV gives.
  {
    EngineOptions plain_options = options;
    plain_options.snapkv_budget = 0;
    std::unique_ptr<Engine> plain = make_engine(loaded, pool, plain_options);
    ASSERT_TRUE(plain);
    EXPECT_EQ(run_alone(*plain, greedy_request(prompt, 24)).tokens, again.tokens);
    // A prompt within the budget stays whole while its answer grows past the budget.
    const std::vector<TokenId> short_prompt(other.begin(), other.begin() + 100);
    EXPECT_EQ(run_alone(*engine, greedy_request(short_prompt, 60)).tokens,
              run_alone(*plain, greedy_request(short_prompt, 60)).tokens);
    EXPECT_EQ(settled_metrics(*engine).snapkv_compactions_total, 2u);
  }
  expect_pool_back_to_full(*engine);

  // Refused where it cannot work.
  EngineOptions bad = options;
  bad.snapkv_budget = 16;
  EXPECT_FALSE(Engine::create(model, *loaded.tokenizer, pool, bad).ok());
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, EngineCacheTypeTest,
                         testing::Values(DType::kF16, DType::kQ8_0),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(kv_cache_type_name(info.param));
                         });

// With too little KV memory for everyone, requests are preempted and recomputed later; each
// still produces exactly the tokens it produces alone.
TEST(EngineTest, PreemptAndResumeGivesTheSameTokens) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  const ModelConfig& config = loaded.model->config();
  EngineOptions options;
  options.block_size = 16;
  // 16 blocks = 256 tokens for 5 requests that each grow to 60-100 tokens.
  options.kv_cache_bytes = static_cast<int64_t>(PagedKvCache::block_bytes(
                               config.num_layers, config.kv_size(), 16, DType::kF16)) * 16;
  options.max_batch_tokens = 64;
  options.enable_prefix_cache = false;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const std::vector<std::vector<TokenId>> prompts = make_prompts(*loaded.tokenizer, 5);
  std::vector<EngineOutput> alone;
  for (const auto& prompt : prompts) alone.push_back(run_alone(*engine, greedy_request(prompt, 48)));
  EXPECT_EQ(engine->metrics().preemptions_total, 0u);

  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& prompt : prompts) streams.push_back(*engine->submit(greedy_request(prompt, 48)));
  for (size_t i = 0; i < streams.size(); ++i) {
    const EngineOutput together = streams[i]->wait_for_all();
    ASSERT_TRUE(together.status.ok()) << together.status.message();
    EXPECT_EQ(together.tokens, alone[i].tokens) << "request " << i;
  }
  EXPECT_GT(engine->metrics().preemptions_total, 0u);
  expect_pool_back_to_full(*engine);
}

// Higher priority requests are served first when they compete for the running slots.
TEST(EngineTest, HighPriorityIsAdmittedFirst) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  options.max_running_requests = 1;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const auto prompts = make_prompts(*loaded.tokenizer, 3);
  // The first occupies the only slot; then a low and a high priority request queue up.
  auto first = *engine->submit(greedy_request(prompts[0], 32));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EngineRequest low = greedy_request(prompts[1], 4);
  low.priority = Priority::kLow;
  EngineRequest high = greedy_request(prompts[2], 4);
  high.priority = Priority::kHigh;
  std::vector<int> finish_order;
  std::mutex mutex;
  auto low_stream = *engine->submit(std::move(low));
  auto high_stream = *engine->submit(std::move(high));
  std::thread low_waiter([&] {
    low_stream->wait_for_all();
    std::lock_guard<std::mutex> lock(mutex);
    finish_order.push_back(1);
  });
  std::thread high_waiter([&] {
    high_stream->wait_for_all();
    std::lock_guard<std::mutex> lock(mutex);
    finish_order.push_back(2);
  });
  first->wait_for_all();
  low_waiter.join();
  high_waiter.join();
  EXPECT_EQ(finish_order, (std::vector<int>{2, 1}));
  expect_pool_back_to_full(*engine);
}

// Cancelling a running request ends it with kCancelled and frees its blocks; a deadline ends
// one with kDeadlineExceeded.
TEST(EngineTest, CancelAndDeadlineFreeTheBlocks) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const auto prompts = make_prompts(*loaded.tokenizer, 2);
  auto stream = *engine->submit(greedy_request(prompts[0], 100000));
  std::optional<EngineOutput> first = stream->pop(std::chrono::seconds(30));
  ASSERT_TRUE(first.has_value());
  engine->cancel(stream->id());
  const EngineOutput rest = stream->wait_for_all();
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(rest.finish_reason, FinishReason::kNone);
  expect_pool_back_to_full(*engine);

  EngineRequest timed = greedy_request(prompts[1], 100000);
  timed.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  const EngineOutput expired = run_alone(*engine, std::move(timed));
  EXPECT_EQ(expired.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_GT(expired.completion_tokens, 0);
  expect_pool_back_to_full(*engine);
  engine->cancel(12345);  // unknown ids are ignored
}

// abandon() (a distributed job whose rank is gone) ends unfinished requests at once from the
// calling thread with its reason; finished ones keep their end; later submits are refused.
TEST(EngineTest, AbandonEndsUnfinishedRequestsFromTheCallingThread) {
  LoadedModel& loaded = default_model();
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  const auto prompts = make_prompts(*loaded.tokenizer, 2);
  const EngineOutput done = run_alone(*engine, greedy_request(prompts[0], 4));
  ASSERT_TRUE(done.status.ok());
  auto finished = *engine->submit(greedy_request(prompts[0], 2));
  EXPECT_TRUE(finished->wait_for_all().status.ok());
  auto running = *engine->submit(greedy_request(prompts[1], 100000));
  ASSERT_TRUE(running->pop(std::chrono::seconds(30)).has_value());
  engine->abandon(cancelled("the job is ending"));
  const EngineOutput rest = running->wait_for_all();
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(rest.status.message(), "the job is ending");
  EXPECT_FALSE(finished->try_pop().has_value());  // nothing after its own end
  Result<std::shared_ptr<RequestStream>> refused = engine->submit(greedy_request(prompts[0], 4));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(), "the job is ending");
  EXPECT_TRUE(engine->stop_within(std::chrono::seconds(30)));  // its thread was not stuck
}

// Bad requests are refused at submit with a message naming the numbers; a full context ends
// a request with kLength.
TEST(EngineTest, RejectsBadRequestsAndStopsAtTheContext) {
  LoadedModel loaded = load(kTinyModel);
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 4 << 20;
  options.max_context = 64;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->max_context(), 64);
  EXPECT_EQ(engine->submit(greedy_request({}, 4)).status().code(), StatusCode::kInvalidArgument);
  Result<std::shared_ptr<RequestStream>> too_long =
      engine->submit(greedy_request(std::vector<TokenId>(64, 5), 4));
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("64 tokens"), std::string::npos)
      << too_long.status().message();
  EXPECT_EQ(engine->submit(greedy_request({-1}, 4)).status().code(),
            StatusCode::kInvalidArgument);
  EngineRequest bad_sampling = greedy_request({1, 2}, 4);
  bad_sampling.sampling.temperature = -1;
  EXPECT_EQ(engine->submit(bad_sampling).status().code(), StatusCode::kInvalidArgument);

  EngineRequest unbounded = greedy_request(std::vector<TokenId>(60, 5), 1000);
  const EngineOutput full = run_alone(*engine, unbounded);
  EXPECT_EQ(full.finish_reason, FinishReason::kLength);
  EXPECT_EQ(full.completion_tokens, 4);  // 60 + 4 = 64 positions
  expect_pool_back_to_full(*engine);
}

// Destroying the engine ends every unfinished request with kCancelled.
TEST(EngineTest, ShutdownCancelsUnfinishedRequests) {
  LoadedModel loaded = load(kTinyModel);
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 4 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  auto stream = *engine->submit(greedy_request({1, 2, 3}, 100000));
  engine.reset();
  const EngineOutput output = stream->wait_for_all();
  EXPECT_EQ(output.status.code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace tachyon
