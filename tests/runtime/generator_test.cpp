#include "runtime/generator.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

// The tiny models are written by the make_tiny_models ctest fixture (tests/models).
const std::string kModel = std::string(TACHYON_TINY_MODELS) + "/llama_gqa.f32.gguf";

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(kModel);
    ASSERT_TRUE(file.ok()) << file.status().message();
    file_ = std::move(*file);
    Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    tokenizer_ = std::move(*tokenizer);
    Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(*file_);
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = std::move(*model);
  }

  SamplingParams greedy(int max_tokens) {
    SamplingParams params;
    params.temperature = 0;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    return params;
  }

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<DecoderModel> model_;
  ThreadPool pool_{2};
};

// A follow-up prompt that extends the previous sequence reuses its cache, and the tokens are
// the same as from a cold start (the cache holds exactly what recomputing would produce).
TEST_F(GeneratorTest, PrefixReuseGivesTheSameTokensAsAColdRun) {
  const std::vector<TokenId> first = tokenizer_->encode("hello world, this is");
  Generator warm(*model_, *tokenizer_, pool_, 128, /*batch_size=*/8);
  Result<GenerationOutput> one = warm.generate(first, greedy(10), [](std::string_view) {});
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->cached_prompt_tokens, 0);
  ASSERT_EQ(one->tokens.size(), 10u);

  std::vector<TokenId> second = first;
  second.insert(second.end(), one->tokens.begin(), one->tokens.end());
  const std::vector<TokenId> more = tokenizer_->encode(" and more");
  second.insert(second.end(), more.begin(), more.end());
  Result<GenerationOutput> two = warm.generate(second, greedy(12), [](std::string_view) {});
  ASSERT_TRUE(two.ok());
  // Everything but the last generated token was computed (it was sampled, never fed back).
  EXPECT_EQ(two->cached_prompt_tokens, static_cast<int>(first.size() + one->tokens.size() - 1));

  Generator cold(*model_, *tokenizer_, pool_, 128, /*batch_size=*/5);
  Result<GenerationOutput> fresh = cold.generate(second, greedy(12), [](std::string_view) {});
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->cached_prompt_tokens, 0);
  EXPECT_EQ(two->tokens, fresh->tokens);
}

TEST_F(GeneratorTest, StopsAtMaxTokensAndAtAFullContext) {
  const std::vector<TokenId> prompt = tokenizer_->encode("abc");
  Generator generator(*model_, *tokenizer_, pool_, 16);
  std::string streamed;
  Result<GenerationOutput> capped =
      generator.generate(prompt, greedy(5), [&](std::string_view text) { streamed += text; });
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->tokens.size(), 5u);
  EXPECT_EQ(capped->finish_reason, FinishReason::kLength);
  EXPECT_EQ(capped->text, streamed);

  Result<GenerationOutput> full = generator.generate(prompt, greedy(1000), [](std::string_view) {});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->finish_reason, FinishReason::kLength);
  EXPECT_EQ(prompt.size() + full->tokens.size(), 16u);
}

TEST_F(GeneratorTest, RejectsEmptyAndOverlongPrompts) {
  Generator generator(*model_, *tokenizer_, pool_, 8);
  Result<GenerationOutput> empty = generator.generate({}, greedy(4), [](std::string_view) {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "the prompt is empty");
  const std::vector<TokenId> long_prompt(8, 65);
  Result<GenerationOutput> too_long =
      generator.generate(long_prompt, greedy(4), [](std::string_view) {});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().message(), "prompt has 8 tokens, context is 8");
}

TEST_F(GeneratorTest, CancelStopsGeneration) {
  const std::vector<TokenId> prompt = tokenizer_->encode("abc");
  Generator generator(*model_, *tokenizer_, pool_, 64);
  std::atomic<bool> cancel{false};
  int pieces = 0;
  Result<GenerationOutput> output = generator.generate(
      prompt, greedy(50),
      [&](std::string_view) {
        if (++pieces == 3) cancel = true;
      },
      &cancel);
  ASSERT_TRUE(output.ok());
  EXPECT_TRUE(output->cancelled);
  EXPECT_LT(output->tokens.size(), 50u);
}

}  // namespace
}  // namespace tachyon
