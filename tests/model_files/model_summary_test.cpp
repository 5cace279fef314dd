#include "model_files/model_summary.h"

#include <gtest/gtest.h>

#include "core/paths.h"

namespace tachyon {
namespace {

TEST(ModelSummaryTest, DefaultModel) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(default_model_path());
  ASSERT_TRUE(file.ok()) << file.status().message() << " (run `make setup` to fetch it)";
  const ModelSummary summary = summarize_model(**file);
  EXPECT_EQ(summary.architecture, "llama");
  EXPECT_EQ(summary.num_layers, 30u);
  EXPECT_EQ(summary.embedding_size, 576u);
  EXPECT_EQ(summary.feed_forward_size, 1536u);
  EXPECT_EQ(summary.num_heads, 9u);
  EXPECT_EQ(summary.num_kv_heads, 3u);
  EXPECT_EQ(summary.head_size, 64u);
  EXPECT_EQ(summary.context_length, 8192u);
  EXPECT_EQ(summary.rope_freq_base, 100000.0);
  // SmolLM2-135M: 134,515,008 parameters (tied embeddings stored once).
  EXPECT_EQ(summary.num_parameters, 134515008u);
  EXPECT_EQ(summary.tensor_type_counts.at("Q4_1"), 210u);
  EXPECT_EQ(summary.tensor_type_counts.at("F32"), 61u);
  EXPECT_EQ(summary.tensor_type_counts.at("Q8_0"), 1u);
  EXPECT_EQ(summary.tokenizer_model, "gpt2");
  EXPECT_EQ(summary.tokenizer_pre, "smollm");
  EXPECT_EQ(summary.vocabulary_size, 49152u);
  EXPECT_EQ(summary.num_merges, 48900u);
  EXPECT_TRUE(summary.has_chat_template);
  ASSERT_FALSE(summary.special_tokens.empty());
  EXPECT_EQ(summary.special_tokens[0].role, "bos");
  EXPECT_EQ(summary.special_tokens[0].text, "<|im_start|>");
}

}  // namespace
}  // namespace tachyon
