#include "server/engine_request_builder.h"

#include <gtest/gtest.h>

#include "byte_vocabulary.h"

#include <cstdio>
#include <memory>

namespace tachyon::server {
namespace {

namespace json = boost::json;

// SentencePiece with byte fallback and no merges: every byte of text is one token, so prompt
// lengths are easy to predict. BOS is added for raw prompts.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  Vocabulary vocabulary = byte_vocabulary();
  vocabulary.bos_id = 1;
  vocabulary.eos_id = 2;
  vocabulary.add_bos = true;
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_vocabulary(std::move(vocabulary));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return std::move(*tokenizer);
}

class EngineRequestBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = byte_tokenizer();
    Result<ChatTemplate> parsed = ChatTemplate::parse(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}");
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    template_ = std::make_unique<ChatTemplate>(std::move(*parsed));
    model_.id = "m";
    model_.tokenizer = tokenizer_.get();
    model_.chat_template = template_.get();
    model_.bos_token = "<s>";
    model_.eos_token = "</s>";
    model_.max_context = 64;
  }

  OpenAiRequest chat(const std::string& content) {
    OpenAiRequest request;
    request.endpoint = Endpoint::kChatCompletions;
    request.model = "m";
    request.messages.push_back(json::object{{"role", "user"}, {"content", content}});
    return request;
  }

  OpenAiRequest completion(const std::string& prompt) {
    OpenAiRequest request;
    request.endpoint = Endpoint::kCompletions;
    request.model = "m";
    request.prompt_text = prompt;
    return request;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  ServedModel model_;
};

TEST_F(EngineRequestBuilderTest, ChatRendersTheTemplateWithoutAddingBos) {
  EngineRequest out;
  OpenAiRequest request = chat("hi");
  request.priority = Priority::kHigh;
  request.cache_salt = "salt";
  ASSERT_FALSE(build_engine_request(request, model_, out));
  // "<s>" (one special token) + "[user]hi[assistant]" (19 bytes): no second BOS.
  ASSERT_EQ(out.prompt.size(), 20u);
  EXPECT_EQ(out.prompt[0], 1);
  EXPECT_EQ(out.prompt[1], 3 + '[');
  EXPECT_EQ(*tokenizer_->decode(out.prompt), "<s>[user]hi[assistant]");
  // Chat generates until the context is full by default.
  EXPECT_EQ(*out.sampling.max_tokens, 64 - 20);
  EXPECT_EQ(out.priority, Priority::kHigh);
  EXPECT_EQ(out.cache_salt, "salt");
  EXPECT_TRUE(out.skip_special_tokens);
  EXPECT_FALSE(out.deadline);
}

TEST_F(EngineRequestBuilderTest, CompletionAddsBosAndDefaultsTo16Tokens) {
  EngineRequest out;
  ASSERT_FALSE(build_engine_request(completion("abc"), model_, out));
  EXPECT_EQ(out.prompt, (std::vector<TokenId>{1, 3 + 'a', 3 + 'b', 3 + 'c'}));
  EXPECT_EQ(*out.sampling.max_tokens, 16);
  // Near the end of the context the default shrinks instead of failing.
  ASSERT_FALSE(build_engine_request(completion(std::string(55, 'x')), model_, out));
  EXPECT_EQ(*out.sampling.max_tokens, 64 - 56);
}

TEST_F(EngineRequestBuilderTest, TokenIdPromptsAreCheckedAgainstTheVocabulary) {
  OpenAiRequest request = completion("");
  request.prompt_text.reset();
  request.prompt_tokens = {1, 5, 7};
  EngineRequest out;
  ASSERT_FALSE(build_engine_request(request, model_, out));
  EXPECT_EQ(out.prompt, (std::vector<TokenId>{1, 5, 7}));
  request.prompt_tokens = {1, 259};
  std::optional<ApiError> error = build_engine_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param.value_or(""), "prompt");
  EXPECT_EQ(error->message, "'prompt' token id 259 is outside the vocabulary of 259 tokens");
}

TEST_F(EngineRequestBuilderTest, PromptTooLongUsesOpenAiWording) {
  EngineRequest out;
  // 18 template tokens + 46: no room left for a generated token.
  std::optional<ApiError> error = build_engine_request(chat(std::string(46, 'x')), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(error->code.value_or(""), "context_length_exceeded");
  EXPECT_EQ(error->param.value_or(""), "messages");
  EXPECT_EQ(error->message,
            "This model's maximum context length is 64 tokens. However, your messages resulted "
            "in 64 tokens. Please reduce the length of the messages.");
  // One fewer fits.
  EXPECT_FALSE(build_engine_request(chat(std::string(45, 'x')), model_, out));
  EXPECT_EQ(*out.sampling.max_tokens, 1);

  error = build_engine_request(completion(std::string(80, 'x')), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param.value_or(""), "prompt");
  EXPECT_EQ(error->message,
            "This model's maximum context length is 64 tokens. However, your prompt resulted in "
            "81 tokens. Please reduce the length of the prompt.");
}

TEST_F(EngineRequestBuilderTest, MaxTokensPastTheContextUsesOpenAiWording) {
  OpenAiRequest request = chat("hi");
  request.sampling.max_tokens = 50;
  EngineRequest out;
  std::optional<ApiError> error = build_engine_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code.value_or(""), "context_length_exceeded");
  EXPECT_EQ(error->param.value_or(""), "messages");
  EXPECT_EQ(error->message,
            "This model's maximum context length is 64 tokens. However, you requested 70 tokens "
            "(20 in the messages, 50 in the completion). Please reduce the length of the "
            "messages or completion.");
  request.sampling.max_tokens = 44;
  ASSERT_FALSE(build_engine_request(request, model_, out));
  EXPECT_EQ(*out.sampling.max_tokens, 44);
}

TEST_F(EngineRequestBuilderTest, SamplingIsValidatedAgainstTheVocabulary) {
  OpenAiRequest request = chat("hi");
  request.sampling.logit_bias[300] = 1.0f;
  EngineRequest out;
  std::optional<ApiError> error = build_engine_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param.value_or(""), "logit_bias");
  EXPECT_NE(error->message.find("300"), std::string::npos);
}

TEST_F(EngineRequestBuilderTest, TemplateProblems) {
  model_.chat_template = nullptr;
  EngineRequest out;
  std::optional<ApiError> error = build_engine_request(chat("hi"), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param.value_or(""), "messages");

  Result<ChatTemplate> strict = ChatTemplate::parse(
      "{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}"
      "{% endif %}");
  ASSERT_TRUE(strict.ok());
  model_.chat_template = &*strict;
  error = build_engine_request(chat("hi"), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param.value_or(""), "messages");
  EXPECT_NE(error->message.find("need a system message"), std::string::npos) << error->message;
}

TEST(ParamOfValidationMessageTest, TakesTheLeadingFieldName) {
  EXPECT_EQ(param_of_validation_message("top_p must be in (0, 1], got 0"), "top_p");
  EXPECT_EQ(param_of_validation_message("stop[0] must not be empty"), "stop");
  EXPECT_EQ(param_of_validation_message("logit_bias token id 5 is out of range"), "logit_bias");
  EXPECT_EQ(param_of_validation_message("Something else"), "");
}

// context_overflow "truncate": whole oldest turns go until the prompt leaves room for
// max_tokens (or a quarter of the context); the system message and the last user turn stay;
// what was dropped is reported. Byte tokens: "[system]sys" is 11, "[user]qqqq" 10,
// "[assistant]aa" 13, "[user]last" 10, plus BOS and "[assistant]" (12).
TEST_F(EngineRequestBuilderTest, TruncateDropsTheOldestTurns) {
  OpenAiRequest request;
  request.endpoint = Endpoint::kChatCompletions;
  request.model = "m";
  request.messages.push_back(json::object{{"role", "system"}, {"content", "sys"}});
  for (int i = 0; i < 3; ++i) {
    request.messages.push_back(json::object{{"role", "user"}, {"content", "qqqq"}});
    request.messages.push_back(json::object{{"role", "assistant"}, {"content", "aa"}});
  }
  request.messages.push_back(json::object{{"role", "user"}, {"content", "last"}});
  // Whole: 1 + 11 + 3 * 23 + 10 + 11 = 102 tokens, more than the context of 64.
  EngineRequest out;
  std::optional<ApiError> error = build_engine_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code.value_or(""), "context_length_exceeded");

  request.context_overflow = ContextOverflow::kTruncate;
  request.sampling.max_tokens = 8;  // at most 56 prompt tokens: two turns go (102 - 2 * 23)
  PromptTruncation truncation;
  ASSERT_FALSE(build_engine_request(request, model_, out, &truncation));
  EXPECT_EQ(*tokenizer_->decode(out.prompt), "<s>[system]sys[user]qqqq[assistant]aa[user]last[assistant]");
  EXPECT_EQ(out.prompt.size(), 56u);
  EXPECT_EQ(truncation.dropped_messages, 4);
  EXPECT_EQ(truncation.dropped_tokens, 102 - 56);
  EXPECT_EQ(*out.sampling.max_tokens, 8);

  // Without max_tokens a quarter of the context (16) stays free: at most 48 prompt tokens.
  request.sampling.max_tokens.reset();
  ASSERT_FALSE(build_engine_request(request, model_, out, &truncation));
  EXPECT_EQ(*tokenizer_->decode(out.prompt), "<s>[system]sys[user]last[assistant]");
  EXPECT_EQ(truncation.dropped_messages, 6);
  EXPECT_EQ(*out.sampling.max_tokens, 64 - 33);

  // The server's default applies when the request does not say; the request's wins.
  request.context_overflow.reset();
  model_.context_overflow = ContextOverflow::kTruncate;
  EXPECT_FALSE(build_engine_request(request, model_, out));
  request.context_overflow = ContextOverflow::kError;
  EXPECT_TRUE(build_engine_request(request, model_, out));

  // What must stay does not fit: a 400 that says so.
  request.context_overflow = ContextOverflow::kTruncate;
  request.messages.back().as_object()["content"] = std::string(40, 'x');
  error = build_engine_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code.value_or(""), "context_length_exceeded");
  EXPECT_EQ(error->message,
            "This model's maximum context length is 64 tokens and context_overflow is "
            "\"truncate\", but the system messages and the last user turn alone take 69 "
            "tokens; at most 48 fit. Please reduce the length of the messages or completion.");
}

TEST_F(EngineRequestBuilderTest, TruncateKeepsBosAndTheLastPromptTokens) {
  OpenAiRequest request = completion(std::string(30, 'a') + std::string(50, 'z'));
  request.context_overflow = ContextOverflow::kTruncate;
  request.sampling.max_tokens = 14;
  EngineRequest out;
  PromptTruncation truncation;
  ASSERT_FALSE(build_engine_request(request, model_, out, &truncation));
  ASSERT_EQ(out.prompt.size(), 50u);  // BOS + the last 49 bytes
  EXPECT_EQ(out.prompt[0], 1);
  EXPECT_EQ(*tokenizer_->decode(out.prompt), "<s>" + std::string(49, 'z'));
  EXPECT_EQ(truncation.dropped_tokens, 81 - 50);
  EXPECT_EQ(truncation.dropped_messages, 0);
}

}  // namespace
}  // namespace tachyon::server
