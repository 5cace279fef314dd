#include "server/openai_response.h"

#include <gtest/gtest.h>

#include "byte_vocabulary.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

namespace tachyon::server {
namespace {

namespace json = boost::json;

// Byte tokens: id 3 + b spells byte b.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  Vocabulary vocabulary = byte_vocabulary();
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_vocabulary(std::move(vocabulary));
  return std::move(*tokenizer);
}

TokenId byte_token(unsigned char byte) {
  return 3 + byte;
}

class ResponseBuilderTest : public ::testing::Test {
 protected:
  std::unique_ptr<Tokenizer> tokenizer_ = byte_tokenizer();
};

TEST_F(ResponseBuilderTest, ChatCompletionShape) {
  ResponseBuilder builder(Endpoint::kChatCompletions, "my-model", *tokenizer_, false);
  EXPECT_EQ(builder.id().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(builder.id().size(), 9u + 24u);
  const json::object response =
      builder.response("Hello", false, {}, FinishReason::kStop, Usage{10, 2, 4});
  const std::string expected =
      R"({"id":")" + builder.id() + R"(","object":"chat.completion","created":)" +
      std::to_string(builder.created()) +
      R"(,"model":"my-model","system_fingerprint":"fp_tachyon","choices":[{"index":0,)"
      R"("message":{"role":"assistant","content":"Hello","refusal":null},"logprobs":null,)"
      R"("finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,)"
      R"("total_tokens":12,"prompt_tokens_details":{"cached_tokens":4},)"
      R"("completion_tokens_details":{"reasoning_tokens":0}}})";
  EXPECT_EQ(json::serialize(response), expected);
  EXPECT_GT(builder.created(), 1700000000);
}

TEST_F(ResponseBuilderTest, TextCompletionShape) {
  ResponseBuilder builder(Endpoint::kCompletions, "m", *tokenizer_, false);
  EXPECT_EQ(builder.id().rfind("cmpl-", 0), 0u);
  const json::object response =
      builder.response("abc", false, {}, FinishReason::kLength, Usage{1, 3, 0});
  EXPECT_EQ(response.at("object"), "text_completion");
  EXPECT_EQ(json::serialize(response.at("choices")),
            R"([{"index":0,"text":"abc","logprobs":null,"finish_reason":"length"}])");
  EXPECT_EQ(response.at("usage").at("total_tokens"), 4);
}

TEST_F(ResponseBuilderTest, ChatLogprobsCarryTokenTextAndBytes) {
  ResponseBuilder builder(Endpoint::kChatCompletions, "m", *tokenizer_, false);
  SampleLogprobs sample;
  sample.chosen = {byte_token('A'), -0.5f};
  sample.top = {{byte_token('A'), -0.5f},
                {byte_token(0xE2), -std::numeric_limits<float>::infinity()}};
  const json::object response =
      builder.response("A", true, {sample}, FinishReason::kStop, Usage{1, 1, 0});
  EXPECT_EQ(json::serialize(response.at("choices").at(0).at("logprobs")),
            R"({"content":[{"token":"A","logprob":-5E-1,"bytes":[65],"top_logprobs":[)"
            R"({"token":"A","logprob":-5E-1,"bytes":[65]},)"
            R"({"token":"\\xe2","logprob":-9.999E3,"bytes":[226]}]}],"refusal":null})");
}

TEST_F(ResponseBuilderTest, CompletionLogprobsCarryOffsets) {
  ResponseBuilder builder(Endpoint::kCompletions, "m", *tokenizer_, true);
  SampleLogprobs first, second;
  first.chosen = {byte_token('h'), -1.0f};
  first.top = {{byte_token('h'), -1.0f}, {byte_token('j'), -2.0f}};
  second.chosen = {byte_token('i'), -0.25f};
  json::object chunk = builder.text_chunk("h", true, {first});
  EXPECT_EQ(json::serialize(chunk.at("choices").at(0).at("logprobs")),
            R"({"tokens":["h"],"token_logprobs":[-1E0],"top_logprobs":[{"h":-1E0,"j":-2E0}],)"
            R"("text_offset":[0]})");
  // Offsets continue across chunks.
  chunk = builder.text_chunk("i", true, {second});
  EXPECT_EQ(chunk.at("choices").at(0).at("logprobs").at("text_offset").at(0), 1);
}

TEST_F(ResponseBuilderTest, ChatStreamChunks) {
  ResponseBuilder builder(Endpoint::kChatCompletions, "m", *tokenizer_, /*include_usage=*/true);
  const std::string head =
      R"({"id":")" + builder.id() + R"(","object":"chat.completion.chunk","created":)" +
      std::to_string(builder.created()) + R"(,"model":"m","system_fingerprint":"fp_tachyon",)";
  EXPECT_EQ(json::serialize(builder.role_chunk()),
            head + R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
                   R"("logprobs":null,"finish_reason":null}],"usage":null})");
  EXPECT_EQ(json::serialize(builder.text_chunk("Hi", false, {})),
            head + R"("choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,)"
                   R"("finish_reason":null}],"usage":null})");
  EXPECT_EQ(json::serialize(builder.finish_chunk(FinishReason::kLength)),
            head + R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],)"
                   R"("usage":null})");
  EXPECT_EQ(json::serialize(builder.usage_chunk(Usage{5, 2, 0})),
            head + R"("choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,)"
                   R"("total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},)"
                   R"("completion_tokens_details":{"reasoning_tokens":0}}})");
}

TEST_F(ResponseBuilderTest, WithoutIncludeUsageChunksHaveNoUsageKey) {
  ResponseBuilder builder(Endpoint::kChatCompletions, "m", *tokenizer_, false);
  EXPECT_FALSE(builder.text_chunk("x", false, {}).contains("usage"));
  EXPECT_FALSE(builder.finish_chunk(FinishReason::kStop).contains("usage"));
}

TEST_F(ResponseBuilderTest, CompletionStreamChunks) {
  ResponseBuilder builder(Endpoint::kCompletions, "m", *tokenizer_, false);
  json::object chunk = builder.text_chunk("Hi", false, {});
  EXPECT_EQ(chunk.at("object"), "text_completion");
  EXPECT_EQ(json::serialize(chunk.at("choices")),
            R"([{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}])");
  chunk = builder.finish_chunk(FinishReason::kStop);
  EXPECT_EQ(json::serialize(chunk.at("choices")),
            R"([{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}])");
}

TEST(SseEventTest, Format) {
  EXPECT_EQ(ResponseBuilder::sse_event(json::object{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(PrintableTokenTextTest, EscapesOnlyInvalidBytes) {
  EXPECT_EQ(printable_token_text("abc"), "abc");
  EXPECT_EQ(printable_token_text("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(printable_token_text("\xe2\x80"), "\\xe2\\x80");
  EXPECT_EQ(printable_token_text("a\xffz"), "a\\xffz");
  EXPECT_EQ(printable_token_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
}

TEST(RandomHexTest, LengthAndDigits) {
  const std::string hex = random_hex(40);
  EXPECT_EQ(hex.size(), 40u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(random_hex(24), random_hex(24));
}

}  // namespace
}  // namespace tachyon::server
