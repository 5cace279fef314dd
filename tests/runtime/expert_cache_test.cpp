// --experts-mem (models/expert_cache.h) on tiny MoE models (tools/tiny_models.py): with a cache
// that holds only one layer's experts, so that every step evicts and reads experts back from
// the file, the logits are the same bits as with every expert resident (repacked Q8_0 slots and
// file-layout F32 ones; the MTP layer's experts too), and so are the engine's tokens with MTP
// speculation on; a cache smaller than one layer's experts is refused with a clear error; a
// model file that shrinks under a running model ends the pass (and the engine's requests) with
// an error instead of a crash. Also the expert load counts (models/expert_load.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <random>

#include "kernels/cpu/elementwise.h"
#include "model_files/gguf_file.h"
#include "models/expert_cache.h"
#include "runtime/engine.h"
#include "engine_test_util.h"

namespace tachyon {
namespace {

using testing_util::greedy_request;
using testing_util::make_engine;
using testing_util::run_alone;

std::string tiny_model_path(const std::string& name) {
  return std::string(TACHYON_TINY_MODELS) + "/" + name + ".gguf";
}

std::unique_ptr<GgufFile> open_file(const std::string& path) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? std::move(*file) : nullptr;
}

std::unique_ptr<DecoderModel> load(const GgufFile& file, const MemoryAmount& experts_memory) {
  Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(file, std::nullopt,
                                                                   experts_memory);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(*model) : nullptr;
}

// Bytes of a cache that holds exactly one layer's experts (a cache of every expert tells the
// size of a slot).
int64_t one_layer_of_experts(const GgufFile& file) {
  std::unique_ptr<DecoderModel> model = load(file, MemoryAmount{.fraction = 1.0});
  const ExpertCache& cache = *model->expert_cache();
  return cache.counters().capacity_bytes / cache.num_slots() * model->config().moe.num_experts;
}

// A prompt, then `steps` greedy tokens one at a time: every pass's logits.
std::vector<std::vector<float>> greedy_logits(DecoderModel& model, int steps, ThreadPool& pool) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<TokenIndex> token(0, model.config().vocab_size - 1);
  std::vector<TokenIndex> prompt(21);
  for (TokenIndex& id : prompt) id = token(rng);
  KvCache cache = model.make_cache(64);
  std::vector<std::vector<float>> all;
  std::vector<float> logits;
  Status status = model.forward(prompt, 0, cache, pool, 1, logits);
  EXPECT_TRUE(status.ok()) << status.message();
  all.push_back(logits);
  for (int i = 0; i < steps && status.ok(); ++i) {
    const TokenIndex next = static_cast<TokenIndex>(
        kernels::argmax(logits.data(), static_cast<int64_t>(logits.size())));
    status = model.forward(std::span<const TokenIndex>(&next, 1),
                           static_cast<int>(prompt.size()) + i, cache, pool, 1, logits);
    EXPECT_TRUE(status.ok()) << status.message();
    all.push_back(logits);
  }
  return all;
}

class ExpertCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertCacheTest, SameLogitsAsEveryExpertResident) {
  std::unique_ptr<GgufFile> file = open_file(tiny_model_path(GetParam()));
  ASSERT_TRUE(file);
  ThreadPool pool(2);
  std::unique_ptr<DecoderModel> resident = load(*file, {});
  ASSERT_TRUE(resident);
  EXPECT_EQ(resident->expert_cache(), nullptr);
  const std::vector<std::vector<float>> expected = greedy_logits(*resident, 30, pool);

  const int64_t one_layer = one_layer_of_experts(*file);
  std::unique_ptr<DecoderModel> cached = load(*file, MemoryAmount{.bytes = one_layer});
  ASSERT_TRUE(cached);
  ASSERT_NE(cached->expert_cache(), nullptr);
  const int num_experts = cached->config().moe.num_experts;
  EXPECT_EQ(cached->expert_cache()->num_slots(), num_experts);
  EXPECT_EQ(greedy_logits(*cached, 30, pool), expected);

  const ExpertCache::Counters counters = cached->expert_cache()->counters();
  EXPECT_GT(counters.misses, static_cast<uint64_t>(num_experts)) << "nothing was evicted";
  EXPECT_GT(counters.hits, 0u);
  EXPECT_LE(counters.resident_bytes, counters.capacity_bytes);
  EXPECT_EQ(counters.capacity_bytes, one_layer);
  EXPECT_GT(counters.bytes_read, 0u);
  EXPECT_GT(counters.prefetches, 0u) << "the next layer's experts were never read ahead";

  // Every MoE layer of the trunk saw each of the 21 + 30 tokens choose experts_per_token
  // experts (an MTP layer, which these passes do not run, none).
  const std::vector<ExpertLoad::Layer> layers = cached->expert_load().snapshot();
  ASSERT_FALSE(layers.empty());
  for (const ExpertLoad::Layer& layer : layers) {
    if (layer.layer >= cached->config().num_layers) {
      EXPECT_EQ(layer.total(), 0u);
      continue;
    }
    EXPECT_EQ(layer.total(), 51u * cached->config().moe.experts_per_token) << layer.layer;
    EXPECT_GE(layer.imbalance(), 1.0);
  }
  cached->expert_load().reset();
  EXPECT_EQ(cached->expert_load().snapshot()[0].total(), 0u);
}

INSTANTIATE_TEST_SUITE_P(TinyMoeModels, ExpertCacheTest,
                         ::testing::Values("deepseek_v2_lite.q8_0", "deepseek_v3_groups.q8_0",
                                           "kimi_k2_tiny.f32", "qwen3_moe_tiny.f32",
                                           "mixtral_tiny.f32"));

TEST(ExpertCacheLimitsTest, TooSmallForOneLayerIsRefused) {
  std::unique_ptr<GgufFile> file = open_file(tiny_model_path("deepseek_v2_lite.q8_0"));
  ASSERT_TRUE(file);
  const int64_t one_layer = one_layer_of_experts(*file);
  for (const MemoryAmount& limit :
       {MemoryAmount{.bytes = one_layer - 1}, MemoryAmount{.fraction = 0.01}}) {
    Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(*file, std::nullopt, limit);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(model.status().message().find("smaller than one layer's experts"), std::string::npos)
        << model.status().message();
  }
  // Dense models have no experts to keep in the file.
  std::unique_ptr<GgufFile> dense = open_file(tiny_model_path("llama_gqa.q8_0"));
  ASSERT_TRUE(dense);
  Result<std::unique_ptr<DecoderModel>> model =
      DecoderModel::load(*dense, std::nullopt, MemoryAmount{.fraction = 0.5});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("routed experts"), std::string::npos);
  // Nor do they count expert load.
  std::unique_ptr<DecoderModel> plain = load(*dense, {});
  EXPECT_TRUE(plain->expert_load().empty());
}

// A copy of a tiny model in a directory of its own, removed at the end.
class ScratchModel {
 public:
  explicit ScratchModel(const std::string& name) {
    directory_ = std::filesystem::temp_directory_path() /
                 ("tachyon_expert_cache_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::create_directories(directory_);
    path_ = directory_ / (name + ".gguf");
    std::filesystem::copy_file(tiny_model_path(name), path_,
                               std::filesystem::copy_options::overwrite_existing);
  }
  ~ScratchModel() { std::filesystem::remove_all(directory_); }
  std::string path() const { return path_.string(); }
  // Cuts the file to its header, as a copy over it in progress would.
  void truncate(const GgufFile& file) {
    std::filesystem::resize_file(path_, file.data_offset());
  }

 private:
  std::filesystem::path directory_;
  std::filesystem::path path_;
};

TEST(ExpertCacheFileTest, AFileThatShrinksEndsThePassWithAnError) {
  ScratchModel scratch("deepseek_v2_lite.q8_0");
  std::unique_ptr<GgufFile> file = open_file(scratch.path());
  ASSERT_TRUE(file);
  std::unique_ptr<DecoderModel> model = load(*file, MemoryAmount{.bytes = one_layer_of_experts(*file)});
  ASSERT_TRUE(model);
  ThreadPool pool(2);
  KvCache cache = model->make_cache(64);
  std::vector<float> logits;
  std::vector<TokenIndex> tokens(8);
  std::iota(tokens.begin(), tokens.end(), 5);
  ASSERT_TRUE(model->forward(tokens, 0, cache, pool, 1, logits).ok());
  scratch.truncate(*file);
  // Within a few tokens some step needs an expert that is not resident.
  Status status;
  for (int position = 8; position < 40 && status.ok(); ++position) {
    const TokenIndex token = 3 + position % 50;
    status = model->forward(std::span<const TokenIndex>(&token, 1), position, cache, pool, 1,
                            logits);
  }
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("shorter than when it was loaded"), std::string::npos)
      << status.message();
}

TEST(ExpertCacheFileTest, TheEngineEndsRequestsWithAnErrorAndKeepsServing) {
  ScratchModel scratch("deepseek_v3_groups.q8_0");
  testing_util::LoadedModel loaded;
  loaded.file = open_file(scratch.path());
  ASSERT_TRUE(loaded.file);
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*loaded.file);
  ASSERT_TRUE(tokenizer.ok());
  loaded.tokenizer = std::move(*tokenizer);
  loaded.model = load(*loaded.file, MemoryAmount{.bytes = one_layer_of_experts(*loaded.file)});
  ASSERT_TRUE(loaded.model);
  ThreadPool pool(2);
  EngineOptions options;
  options.kv_cache_bytes = 16 << 20;
  std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
  ASSERT_TRUE(engine);
  std::vector<TokenId> prompt(12);
  std::iota(prompt.begin(), prompt.end(), 7);
  EXPECT_TRUE(run_alone(*engine, greedy_request(prompt, 5)).status.ok());
  scratch.truncate(*loaded.file);
  bool failed = false;
  for (int i = 0; i < 10 && !failed; ++i) {
    prompt[0] = 20 + i;  // no prefix-cache hit covers the whole prompt
    const EngineOutput output = run_alone(*engine, greedy_request(prompt, 20));
    if (!output.status.ok()) {
      failed = true;
      EXPECT_NE(output.status.message().find("cannot read expert"), std::string::npos)
          << output.status.message();
    }
  }
  EXPECT_TRUE(failed) << "no request needed an expert from the cut file";
  testing_util::expect_pool_back_to_full(*engine);
}

TEST(ExpertCacheMtpTest, SpeculationWithTheMtpLayerGivesTheResidentTokens) {
  std::unique_ptr<GgufFile> file = open_file(tiny_model_path("deepseek_v3_groups.q8_0"));
  ASSERT_TRUE(file);
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tokenizer.ok());
  ThreadPool pool(2);
  std::vector<TokenId> prompt(30);
  std::mt19937 rng(11);
  for (TokenId& id : prompt) id = static_cast<TokenId>(rng() % 200);
  auto run = [&](const MemoryAmount& experts_memory, bool mtp) {
    struct {
      std::unique_ptr<Tokenizer>& tokenizer;
      std::unique_ptr<DecoderModel> model;
    } loaded{*tokenizer, load(*file, experts_memory)};
    EngineOptions options;
    options.kv_cache_bytes = 16 << 20;
    if (mtp) {
      options.speculative.mode = SpeculativeMode::kMtp;
      options.speculative.max_draft_tokens = 3;
      options.speculative.adaptive = false;
    }
    std::unique_ptr<Engine> engine = make_engine(loaded, pool, options);
    const EngineOutput output = run_alone(*engine, greedy_request(prompt, 30));
    EXPECT_TRUE(output.status.ok()) << output.status.message();
    if (mtp) {
      EXPECT_GT(output.draft_tokens, 0);
    }
    engine.reset();
    if (loaded.model->expert_cache() != nullptr) {
      EXPECT_GT(loaded.model->expert_cache()->counters().misses,
                static_cast<uint64_t>(loaded.model->config().moe.num_experts));
    }
    return output.tokens;
  };
  const std::vector<TokenId> expected = run({}, false);
  EXPECT_EQ(run(MemoryAmount{.bytes = one_layer_of_experts(*file)}, true), expected);
}

}  // namespace
}  // namespace tachyon
