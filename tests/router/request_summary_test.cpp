#include "router/request_summary.h"

#include <string>

#include <gtest/gtest.h>

namespace tachyon::router {
namespace {

constexpr std::string_view kChat = "/v1/chat/completions";
constexpr std::string_view kCompletions = "/v1/completions";

// Where `needle` first occurs in `text` at or after `from`; npos fails the caller's EXPECT_LT.
size_t position(const std::string& text, std::string_view needle, size_t from = 0) {
  return text.find(needle, from);
}

// The prompt's share of estimated_tokens: the prefix text after the model and its separator.
int64_t prompt_tokens(const RequestSummary& summary) {
  return static_cast<int64_t>(summary.prefix_text.size() - summary.model.size() - 1) / 4;
}

TEST(RequestSummaryTest, ChatReadsTheModel) {
  const RequestSummary summary =
      summarize_request(kChat, R"({"model":"llama","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(summary.model, "llama");
  EXPECT_TRUE(summary.prefix_text.starts_with("llama"));
}

TEST(RequestSummaryTest, ChatPrefixIsModelThenToolsThenMessagesInOrder) {
  const RequestSummary summary = summarize_request(kChat, R"({
    "model": "llama",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": "first question"},
      {"role": "assistant", "content": "first answer"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather"}}]
  })");
  const std::string& text = summary.prefix_text;
  // Tools come before the messages though the body gives them after.
  const size_t model = position(text, "llama");
  const size_t tools = position(text, "get_weather");
  const size_t system = position(text, "system");
  const size_t brief = position(text, "be brief");
  const size_t user = position(text, "user");
  const size_t question = position(text, "first question");
  const size_t assistant = position(text, "assistant");
  const size_t answer = position(text, "first answer");
  EXPECT_EQ(model, 0u);
  EXPECT_LT(model, tools);
  EXPECT_LT(tools, system);
  EXPECT_LT(system, brief);
  EXPECT_LT(brief, user);
  EXPECT_LT(user, question);
  EXPECT_LT(question, assistant);
  EXPECT_LT(assistant, answer);
  EXPECT_NE(answer, std::string::npos);
}

TEST(RequestSummaryTest, ConversationsSharingFirstMessagesSharePrefix) {
  const RequestSummary first = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"system","content":"you are a helpful assistant"},
    {"role":"user","content":"hello"}]})");
  const RequestSummary longer = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"system","content":"you are a helpful assistant"},
    {"role":"user","content":"hello"},
    {"role":"assistant","content":"hi, how can I help?"},
    {"role":"user","content":"tell me a joke"}]})");
  const RequestSummary other = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"system","content":"you are a helpful assistant"},
    {"role":"user","content":"goodbye"}]})");
  EXPECT_TRUE(longer.prefix_text.starts_with(first.prefix_text));
  EXPECT_GT(longer.prefix_text.size(), first.prefix_text.size());
  // Same system message, different user message: they share the system part only.
  EXPECT_FALSE(other.prefix_text.starts_with(first.prefix_text));
  const std::string system = "you are a helpful assistant";
  const size_t shared = first.prefix_text.find(system) + system.size();
  EXPECT_EQ(first.prefix_text.substr(0, shared), other.prefix_text.substr(0, shared));
}

TEST(RequestSummaryTest, SamePromptToAnotherModelIsAnotherPrefix) {
  const RequestSummary a =
      summarize_request(kChat, R"({"model":"a","messages":[{"role":"user","content":"hi"}]})");
  const RequestSummary b =
      summarize_request(kChat, R"({"model":"b","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_NE(a.prefix_text, b.prefix_text);
  EXPECT_NE(a.prefix_text[0], b.prefix_text[0]);
}

TEST(RequestSummaryTest, MessageBoundariesMatter) {
  // "ab" + "c" and "a" + "bc" must not give the same text.
  const RequestSummary one = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":"ab"},{"role":"user","content":"c"}]})");
  const RequestSummary two = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":"a"},{"role":"user","content":"bc"}]})");
  EXPECT_NE(one.prefix_text, two.prefix_text);
}

TEST(RequestSummaryTest, ContentPartsReadAsTheirText) {
  const RequestSummary parts = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":[{"type":"text","text":"hello "},{"type":"text","text":"world"}]}]})");
  const RequestSummary plain = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":"hello world"}]})");
  EXPECT_NE(parts.prefix_text.find("hello world"), std::string::npos);
  // Parts and a string with the same text are the same prefix.
  EXPECT_EQ(parts.prefix_text, plain.prefix_text);
}

TEST(RequestSummaryTest, NonTextPartsStillCount) {
  const RequestSummary a = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]})");
  const RequestSummary b = summarize_request(kChat, R"({"model":"m","messages":[
    {"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/b.png"}}]}]})");
  EXPECT_NE(a.prefix_text.find("a.png"), std::string::npos);
  EXPECT_NE(a.prefix_text, b.prefix_text);
}

TEST(RequestSummaryTest, CompletionsPrompt) {
  const RequestSummary summary =
      summarize_request(kCompletions, R"({"model":"m","prompt":"Once upon a time"})");
  EXPECT_EQ(summary.model, "m");
  EXPECT_TRUE(summary.prefix_text.starts_with("m"));
  EXPECT_TRUE(summary.prefix_text.ends_with("Once upon a time"));
  // And a longer prompt with the same start shares the prefix.
  const RequestSummary longer =
      summarize_request(kCompletions, R"({"model":"m","prompt":"Once upon a time, there"})");
  EXPECT_TRUE(longer.prefix_text.starts_with(summary.prefix_text));
}

TEST(RequestSummaryTest, CompletionsIgnoresMessagesAndChatIgnoresPrompt) {
  const RequestSummary completion = summarize_request(
      kCompletions, R"({"model":"m","messages":[{"role":"user","content":"chat text"}]})");
  EXPECT_EQ(completion.prefix_text.find("chat text"), std::string::npos);
  const RequestSummary chat = summarize_request(kChat, R"({"model":"m","prompt":"prompt text"})");
  EXPECT_EQ(chat.prefix_text.find("prompt text"), std::string::npos);
}

TEST(RequestSummaryTest, OtherPathsReadOnlyTheModel) {
  const RequestSummary summary =
      summarize_request("/v1/embeddings", R"({"model":"e","input":"some text"})");
  EXPECT_EQ(summary.model, "e");
  EXPECT_EQ(summary.prefix_text.find("some text"), std::string::npos);
  EXPECT_EQ(prompt_tokens(summary), 0);
  EXPECT_EQ(summary.estimated_tokens, 256);
}

TEST(RequestSummaryTest, EstimatedTokensDefault) {
  // 16 bytes of prompt: 4 tokens, plus the default completion of 256.
  const RequestSummary summary =
      summarize_request(kCompletions, R"({"model":"m","prompt":"0123456789abcdef"})");
  EXPECT_EQ(prompt_tokens(summary), 4);
  EXPECT_EQ(summary.estimated_tokens, 4 + 256);
}

TEST(RequestSummaryTest, EstimatedTokensMaxTokens) {
  EXPECT_EQ(summarize_request(kCompletions, R"({"prompt":"0123456789abcdef","max_tokens":10})")
                .estimated_tokens,
            4 + 10);
  EXPECT_EQ(summarize_request(kCompletions,
                              R"({"prompt":"0123456789abcdef","max_completion_tokens":20})")
                .estimated_tokens,
            4 + 20);
  // Both given: max_completion_tokens (the newer name) wins.
  EXPECT_EQ(summarize_request(
                kCompletions,
                R"({"prompt":"0123456789abcdef","max_tokens":10,"max_completion_tokens":20})")
                .estimated_tokens,
            4 + 20);
  // Not a positive integer: the default.
  for (const char* cap : {"0", "-5", "\"10\"", "null", "1.5"}) {
    const std::string body =
        std::string(R"({"prompt":"0123456789abcdef","max_tokens":)") + cap + "}";
    EXPECT_EQ(summarize_request(kCompletions, body).estimated_tokens, 4 + 256) << cap;
  }
}

TEST(RequestSummaryTest, HugeCapsDoNotOverflowTheEstimate) {
  const int64_t estimate =
      summarize_request(kCompletions, R"({"prompt":"x","max_tokens":9223372036854775807,"n":2})")
          .estimated_tokens;
  EXPECT_GT(estimate, 0);
  EXPECT_EQ(estimate, 2 * (int64_t{1} << 24));
}

TEST(RequestSummaryTest, EstimatedTokensTimesN) {
  EXPECT_EQ(summarize_request(kCompletions, R"({"prompt":"0123456789abcdef","max_tokens":10,"n":3})")
                .estimated_tokens,
            4 + 3 * 10);
  EXPECT_EQ(summarize_request(kCompletions, R"({"prompt":"0123456789abcdef","n":2})")
                .estimated_tokens,
            4 + 2 * 256);
  // n below 2 is one choice.
  EXPECT_EQ(summarize_request(kCompletions, R"({"prompt":"0123456789abcdef","max_tokens":10,"n":0})")
                .estimated_tokens,
            4 + 10);
}

TEST(RequestSummaryTest, ChatEstimateCountsTheMessages) {
  const RequestSummary summary = summarize_request(kChat, R"({"model":"m","max_tokens":7,
    "messages":[{"role":"user","content":"a fairly long question about something"}]})");
  // At least the content's bytes / 4 (roles and separators count too).
  EXPECT_GE(prompt_tokens(summary), 39 / 4);
  EXPECT_EQ(summary.estimated_tokens, prompt_tokens(summary) + 7);
}

TEST(RequestSummaryTest, MalformedJsonGivesEmptySummary) {
  for (std::string_view body : {"", "{", "{\"model\":", "not json", "{\"model\":\"m\",}",
                                "\xff\xfe"}) {
    const RequestSummary summary = summarize_request(kChat, body);
    EXPECT_EQ(summary.model, "") << body;
    EXPECT_EQ(summary.prefix_text, "") << body;
    EXPECT_EQ(summary.estimated_tokens, 0) << body;
  }
}

TEST(RequestSummaryTest, NonObjectJsonGivesEmptySummary) {
  for (std::string_view body : {"[]", "[{\"model\":\"m\"}]", "\"m\"", "42", "null", "true"}) {
    const RequestSummary summary = summarize_request(kCompletions, body);
    EXPECT_EQ(summary.model, "") << body;
    EXPECT_EQ(summary.prefix_text, "") << body;
    EXPECT_EQ(summary.estimated_tokens, 0) << body;
  }
}

TEST(RequestSummaryTest, MissingOrOddFields) {
  // No model, no messages: still a summary, with the default completion.
  RequestSummary summary = summarize_request(kChat, "{}");
  EXPECT_EQ(summary.model, "");
  EXPECT_EQ(summary.estimated_tokens, 256);

  // A model that is not a string is no model.
  summary = summarize_request(kChat, R"({"model":7,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(summary.model, "");
  EXPECT_NE(summary.prefix_text.find("hi"), std::string::npos);

  // messages not an array, entries not objects, content null or missing: skipped, no crash.
  summary = summarize_request(kChat, R"({"model":"m","messages":"hi"})");
  EXPECT_EQ(summary.model, "m");
  summary = summarize_request(kChat, R"({"model":"m","messages":[1,"x",null,
    {"role":"assistant","content":null},{"role":"user"},{"content":"only content"}]})");
  EXPECT_EQ(summary.model, "m");
  EXPECT_NE(summary.prefix_text.find("assistant"), std::string::npos);
  EXPECT_NE(summary.prefix_text.find("only content"), std::string::npos);

  // A completion without a prompt.
  summary = summarize_request(kCompletions, R"({"model":"m","max_tokens":5})");
  EXPECT_EQ(summary.model, "m");
  EXPECT_EQ(summary.estimated_tokens, 5);
}

}  // namespace
}  // namespace tachyon::router
