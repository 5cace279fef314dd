#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

std::vector<std::string> split(std::string_view name, std::string_view text) {
  Result<std::shared_ptr<const PreTokenizer>> pre = PreTokenizer::for_name(name);
  EXPECT_TRUE(pre.ok()) << pre.status().message();
  std::vector<std::string_view> pieces;
  (*pre)->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(split("gpt2", "Hello world's 123  x\n"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " x", "\n"}));
}

TEST(PreTokenizerTest, SmolLmSplitsEveryDigit) {
  EXPECT_EQ(split("smollm", "abc 2024!"), (Pieces{"abc", " ", "2", "0", "2", "4", "!"}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsInThrees) {
  EXPECT_EQ(split("llama-bpe", "1234567 DON'T\n\nx"),
            (Pieces{"123", "456", "7", " DON", "'T", "\n\n", "x"}));
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 123"), (Pieces{"x", " ", "1", "2", "3"}));
}

TEST(PreTokenizerTest, DeepSeekV3IsolatesCjkAndDigits) {
  EXPECT_EQ(split("deepseek-v3", "ab你好12345"), (Pieces{"ab", "你好", "123", "45"}));
}

TEST(PreTokenizerTest, KimiK2IsolatesHan) {
  EXPECT_EQ(split("kimi-k2", "Hello你好World's"), (Pieces{"Hello", "你好", "World's"}));
}

TEST(PreTokenizerTest, InvalidUtf8NeverFails) {
  const Pieces pieces = split("llama-bpe", "a\xff\xfe b\xc3");
  std::string joined;
  for (const std::string& piece : pieces) joined += piece;
  EXPECT_EQ(joined, "a\xff\xfe b\xc3");
}

}  // namespace
}  // namespace tachyon
