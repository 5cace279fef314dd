// The multi-token prediction layer of the tiny DeepSeek-V3 model against the reference that
// tools/make_mtp_golden.py assembles from transformers (tests/golden/mtp): the trunk's final
// hidden states from forward_batch, then forward_mtp_batch over the 63 (hidden at p, token p+1)
// pairs in one pass and again a few tokens at a time (its own paged cache between passes), both
// within 1e-4 of the golden logits of token p+2.
#include "models/decoder_model.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace tachyon {
namespace {

const std::string kGoldenDir = std::string(TACHYON_SOURCE_DIR) + "/tests/golden/mtp/";
constexpr int kBlockSize = 16;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string models_dir() {
  const char* dir = std::getenv("TACHYON_TINY_MODELS");
  return dir ? dir : "tiny_models";
}

// A batch of one sequence: `tokens` at positions first.. of blocks 0, 1, 2, ...
ForwardBatch one_sequence(std::span<const int32_t> tokens, int first, bool all_logits) {
  ForwardBatch batch;
  batch.block_size = kBlockSize;
  BatchSequence sequence;
  sequence.num_tokens = static_cast<int>(tokens.size());
  sequence.start_position = first;
  for (int b = 0; b * kBlockSize < first + static_cast<int>(tokens.size()); ++b) {
    sequence.block_table.push_back(b);
  }
  batch.sequences.push_back(sequence);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.tokens.push_back(tokens[i]);
    batch.positions.push_back(first + static_cast<int>(i));
    batch.slots.push_back(first + static_cast<int64_t>(i));
    if (all_logits || i + 1 == tokens.size()) batch.logits_tokens.push_back(static_cast<int>(i));
  }
  return batch;
}

TEST(MtpLayerTest, MatchesTheTransformersReference) {
  const boost::json::object manifest =
      boost::json::parse(read_file(kGoldenDir + "manifest.json")).as_object();
  const std::string path = models_dir() + "/" + std::string(manifest.at("gguf").as_string());
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << path << ": " << file.status().message();
  Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(**file);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_EQ((*model)->config().num_mtp_layers, 1);
  std::vector<int32_t> tokens;
  for (const auto& id : manifest.at("tokens").as_array()) tokens.push_back(id.to_number<int32_t>());
  const int count = manifest.at("positions").to_number<int>();
  const int vocab = manifest.at("vocab").to_number<int>();
  ASSERT_EQ(count + 1, static_cast<int>(tokens.size()));
  const std::string bytes = read_file(kGoldenDir + std::string(manifest.at("logits").as_string()));
  std::vector<float> golden(bytes.size() / sizeof(float));
  std::memcpy(golden.data(), bytes.data(), bytes.size());
  ASSERT_EQ(golden.size(), static_cast<size_t>(count) * vocab);

  ThreadPool pool(2);
  const int blocks = (static_cast<int>(tokens.size()) + kBlockSize - 1) / kBlockSize;
  const ModelConfig& config = (*model)->config();
  Result<std::unique_ptr<PagedKvCache>> trunk_cache =
      PagedKvCache::create(config.num_layers, config.num_kv_heads, config.head_size, blocks,
                           kBlockSize, DType::kF32, config.kv_values_are_keys());
  ASSERT_TRUE(trunk_cache.ok());
  std::vector<float> logits, hidden;
  ASSERT_TRUE((*model)->forward_batch(one_sequence(tokens, 0, false), **trunk_cache, pool, logits,
                                      nullptr, &hidden).ok());
  const int64_t width = config.hidden_size;
  ASSERT_EQ(hidden.size(), tokens.size() * width);

  // Whole: position p takes token p+1 and the trunk's hidden state at p.
  const std::span<const int32_t> next(tokens.data() + 1, count);
  auto check = [&](const std::vector<float>& got, int first, int rows) {
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      for (int v = 0; v < vocab; ++v) {
        worst = std::max(worst, std::abs(static_cast<double>(got[static_cast<size_t>(r) * vocab + v]) -
                                         golden[static_cast<size_t>(first + r) * vocab + v]));
      }
    }
    return worst;
  };
  {
    Result<std::unique_ptr<PagedKvCache>> cache = (*model)->make_mtp_cache(blocks, kBlockSize, DType::kF32);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    std::vector<float> mtp_logits, mtp_hidden;
    ASSERT_TRUE((*model)->forward_mtp_batch(0, one_sequence(next, 0, true), hidden.data(), **cache,
                                            pool, mtp_logits, &mtp_hidden).ok());
    EXPECT_LE(check(mtp_logits, 0, count), 1e-4);
    EXPECT_EQ(mtp_hidden.size(), static_cast<size_t>(count) * width);
  }
  // In pieces of up to 5 positions, each attending to the cache the earlier ones filled.
  Result<std::unique_ptr<PagedKvCache>> cache = (*model)->make_mtp_cache(blocks, kBlockSize, DType::kF32);
  ASSERT_TRUE(cache.ok());
  for (int first = 0; first < count; first += 5) {
    const int n = std::min(5, count - first);
    std::vector<float> mtp_logits;
    ASSERT_TRUE((*model)->forward_mtp_batch(0, one_sequence(next.subspan(first, n), first, true),
                                            hidden.data() + first * width, **cache, pool,
                                            mtp_logits).ok());
    EXPECT_LE(check(mtp_logits, first, n), 1e-4) << "positions " << first << ".." << first + n - 1;
  }
}

TEST(MtpLayerTest, ModelsWithoutMtpRefuse) {
  const std::string path = models_dir() + "/deepseek_v2_lite.f32.gguf";
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << path;
  Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(**file);
  ASSERT_TRUE(model.ok());
  EXPECT_FALSE((*model)->make_mtp_cache(4, kBlockSize, DType::kF32).ok());
}

}  // namespace
}  // namespace tachyon
