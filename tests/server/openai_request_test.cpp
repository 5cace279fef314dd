#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace tachyon::server {
namespace {

namespace json = boost::json;

std::optional<ApiError> parse(Endpoint endpoint, const std::string& body, OpenAiRequest& out) {
  json::value value;
  if (auto error = parse_json_body(body, value)) return error;
  return parse_openai_request(endpoint, value, out);
}

OpenAiRequest parse_chat_ok(const std::string& fields) {
  OpenAiRequest request;
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}])" +
                           (fields.empty() ? std::string() : "," + fields) + "}";
  std::optional<ApiError> error = parse(Endpoint::kChatCompletions, body, request);
  EXPECT_FALSE(error) << body << " → " << (error ? error->message : "");
  return request;
}

// The error for a chat request with these extra fields (JSON members, comma separated).
ApiError chat_error(const std::string& fields) {
  OpenAiRequest request;
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],)" + fields + "}";
  std::optional<ApiError> error = parse(Endpoint::kChatCompletions, body, request);
  EXPECT_TRUE(error) << body;
  return error.value_or(ApiError());
}

ApiError completion_error(const std::string& fields) {
  OpenAiRequest request;
  std::optional<ApiError> error =
      parse(Endpoint::kCompletions, R"({"model":"m",)" + fields + "}", request);
  EXPECT_TRUE(error) << fields;
  return error.value_or(ApiError());
}

void expect_param(const ApiError& error, const std::string& param) {
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.type, "invalid_request_error");
  EXPECT_EQ(error.param.value_or("<null>"), param) << error.message;
}

TEST(OpenAiRequestTest, MinimalChatHasOpenAiDefaults) {
  OpenAiRequest request = parse_chat_ok("");
  EXPECT_EQ(request.endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(request.model, "m");
  ASSERT_EQ(request.messages.size(), 1u);
  EXPECT_EQ(json::serialize(request.messages[0]), R"({"role":"user","content":"hi"})");
  EXPECT_FALSE(request.sampling.max_tokens);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_FALSE(request.stream);
  EXPECT_FALSE(request.include_usage);
  EXPECT_EQ(request.priority, Priority::kNormal);
  EXPECT_FALSE(request.sampling.logprobs);
}

TEST(OpenAiRequestTest, MalformedBodies) {
  json::value value;
  std::optional<ApiError> error = parse_json_body("{\"model\":", value);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(error->code.value_or(""), "invalid_json");
  error = parse_json_body("[1,2]", value);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code.value_or(""), "invalid_json");
  EXPECT_NE(error->message.find("array"), std::string::npos);
}

TEST(OpenAiRequestTest, ModelIsRequiredAndAString) {
  OpenAiRequest request;
  std::optional<ApiError> error =
      parse(Endpoint::kChatCompletions, R"({"messages":[{"role":"user","content":"x"}]})", request);
  ASSERT_TRUE(error);
  expect_param(*error, "model");
  error = parse(Endpoint::kChatCompletions, R"({"model":3,"messages":[]})", request);
  ASSERT_TRUE(error);
  expect_param(*error, "model");
  EXPECT_EQ(error->code.value_or(""), "invalid_type");
}

TEST(OpenAiRequestTest, MessagesAreChecked) {
  OpenAiRequest request;
  for (const char* messages : {R"("messages":[])", R"("messages":"hi")", R"("messages":null)"}) {
    std::optional<ApiError> error = parse(
        Endpoint::kChatCompletions, std::string(R"({"model":"m",)") + messages + "}", request);
    ASSERT_TRUE(error) << messages;
    expect_param(*error, "messages");
  }
  std::optional<ApiError> error = parse(Endpoint::kChatCompletions, R"({"model":"m"})", request);
  ASSERT_TRUE(error);
  expect_param(*error, "messages");

  auto message_error = [&](const std::string& message) {
    std::optional<ApiError> result =
        parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[)" + message + "]}", request);
    EXPECT_TRUE(result) << message;
    return result.value_or(ApiError());
  };
  expect_param(message_error(R"({"role":"wizard","content":"x"})"), "messages[0].role");
  expect_param(message_error(R"({"content":"x"})"), "messages[0].role");
  expect_param(message_error(R"("hello")"), "messages[0]");
  expect_param(message_error(R"({"role":"user"})"), "messages[0].content");
  expect_param(message_error(R"({"role":"user","content":5})"), "messages[0].content");
  const ApiError image = message_error(
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]})");
  expect_param(image, "messages[0].content[1]");
  EXPECT_EQ(image.code.value_or(""), "unsupported_content");
  expect_param(message_error(R"({"role":"user","content":[{"type":"text"}]})"),
               "messages[0].content[0].text");
}

TEST(OpenAiRequestTest, MessagesAreNormalizedForTheTemplate) {
  OpenAiRequest request;
  ASSERT_FALSE(parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[
      {"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}],"name":"bob"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c","content":"42"}]})",
                     request));
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(json::serialize(request.messages[0]), R"({"role":"system","content":"be brief"})");
  EXPECT_EQ(json::serialize(request.messages[1]),
            R"({"role":"user","content":"one\ntwo","name":"bob"})");
  EXPECT_EQ(request.messages[2].at("content"), "");
  EXPECT_TRUE(request.messages[2].as_object().contains("tool_calls"));
  EXPECT_EQ(request.messages[3].at("tool_call_id"), "c");
}

TEST(OpenAiRequestTest, MaxTokensAliasesTakeTheSmaller) {
  EXPECT_EQ(*parse_chat_ok(R"("max_tokens":50)").sampling.max_tokens, 50);
  EXPECT_EQ(*parse_chat_ok(R"("max_completion_tokens":30)").sampling.max_tokens, 30);
  EXPECT_EQ(*parse_chat_ok(R"("max_tokens":50,"max_completion_tokens":30)").sampling.max_tokens,
            30);
  EXPECT_EQ(*parse_chat_ok(R"("max_tokens":20,"max_completion_tokens":30)").sampling.max_tokens,
            20);
  EXPECT_EQ(*parse_chat_ok(R"("max_tokens":7.0)").sampling.max_tokens, 7);
  EXPECT_FALSE(parse_chat_ok(R"("max_tokens":null)").sampling.max_tokens);
  expect_param(chat_error(R"("max_tokens":0)"), "max_tokens");
  expect_param(chat_error(R"("max_tokens":"5")"), "max_tokens");
  expect_param(chat_error(R"("max_tokens":2.5)"), "max_tokens");
  expect_param(chat_error(R"("max_completion_tokens":-1)"), "max_completion_tokens");
}

TEST(OpenAiRequestTest, SamplingRanges) {
  EXPECT_FLOAT_EQ(parse_chat_ok(R"("temperature":0)").sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(parse_chat_ok(R"("temperature":2)").sampling.temperature, 2.0f);
  expect_param(chat_error(R"("temperature":2.5)"), "temperature");
  expect_param(chat_error(R"("temperature":-0.1)"), "temperature");
  const ApiError wrong_type = chat_error(R"("temperature":"0.5")");
  expect_param(wrong_type, "temperature");
  EXPECT_EQ(wrong_type.code.value_or(""), "invalid_type");
  EXPECT_EQ(wrong_type.message, "'temperature' must be a number, got string");

  EXPECT_FLOAT_EQ(parse_chat_ok(R"("top_p":0.5)").sampling.top_p, 0.5f);
  EXPECT_EQ(parse_chat_ok(R"("top_p":0)").sampling.top_k, 1);  // only the best token
  expect_param(chat_error(R"("top_p":1.5)"), "top_p");
  EXPECT_EQ(parse_chat_ok(R"("top_k":40)").sampling.top_k, 40);
  EXPECT_EQ(parse_chat_ok(R"("top_k":-1)").sampling.top_k, 0);
  expect_param(chat_error(R"("top_k":-2)"), "top_k");
  EXPECT_FLOAT_EQ(parse_chat_ok(R"("min_p":0.1)").sampling.min_p, 0.1f);
  expect_param(chat_error(R"("min_p":2)"), "min_p");
  EXPECT_FLOAT_EQ(parse_chat_ok(R"("presence_penalty":-2)").sampling.presence_penalty, -2.0f);
  expect_param(chat_error(R"("presence_penalty":2.1)"), "presence_penalty");
  expect_param(chat_error(R"("frequency_penalty":-3)"), "frequency_penalty");
  EXPECT_FLOAT_EQ(parse_chat_ok(R"("repetition_penalty":1.1)").sampling.repetition_penalty, 1.1f);
  expect_param(chat_error(R"("repetition_penalty":0)"), "repetition_penalty");
  EXPECT_EQ(*parse_chat_ok(R"("seed":42)").sampling.seed, 42u);
  EXPECT_EQ(*parse_chat_ok(R"("seed":-1)").sampling.seed, ~uint64_t{0});
  expect_param(chat_error(R"("seed":"x")"), "seed");
  EXPECT_TRUE(parse_chat_ok(R"("ignore_eos":true)").sampling.ignore_eos);
  expect_param(chat_error(R"("ignore_eos":1)"), "ignore_eos");
}

TEST(OpenAiRequestTest, Stop) {
  EXPECT_EQ(parse_chat_ok(R"("stop":"\n")").sampling.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(parse_chat_ok(R"("stop":["a","b"])").sampling.stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse_chat_ok(R"("stop":null)").sampling.stop.empty());
  expect_param(chat_error(R"("stop":["a","b","c","d","e"])"), "stop");
  expect_param(chat_error(R"("stop":[1])"), "stop");
  expect_param(chat_error(R"("stop":5)"), "stop");
}

TEST(OpenAiRequestTest, LogitBias) {
  const OpenAiRequest request = parse_chat_ok(R"("logit_bias":{"5":-100,"7":2.5})");
  EXPECT_EQ(request.sampling.logit_bias.size(), 2u);
  EXPECT_FLOAT_EQ(request.sampling.logit_bias.at(5), -100.0f);
  EXPECT_FLOAT_EQ(request.sampling.logit_bias.at(7), 2.5f);
  expect_param(chat_error(R"("logit_bias":{"abc":1})"), "logit_bias");
  expect_param(chat_error(R"("logit_bias":{"-3":1})"), "logit_bias");
  expect_param(chat_error(R"("logit_bias":{"5":101})"), "logit_bias");
  expect_param(chat_error(R"("logit_bias":{"5":"1"})"), "logit_bias");
  expect_param(chat_error(R"("logit_bias":[[5,1]])"), "logit_bias");
}

TEST(OpenAiRequestTest, ChatLogprobs) {
  OpenAiRequest request = parse_chat_ok(R"("logprobs":true,"top_logprobs":3)");
  EXPECT_TRUE(request.sampling.logprobs);
  EXPECT_EQ(request.sampling.top_logprobs, 3);
  expect_param(chat_error(R"("top_logprobs":3)"), "top_logprobs");
  expect_param(chat_error(R"("logprobs":true,"top_logprobs":21)"), "top_logprobs");
  expect_param(chat_error(R"("logprobs":1)"), "logprobs");
}

TEST(OpenAiRequestTest, CompletionLogprobsAreAnInteger) {
  OpenAiRequest request;
  ASSERT_FALSE(
      parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","logprobs":3})", request));
  EXPECT_TRUE(request.sampling.logprobs);
  EXPECT_EQ(request.sampling.top_logprobs, 3);
  ASSERT_FALSE(
      parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","logprobs":0})", request));
  EXPECT_TRUE(request.sampling.logprobs);
  EXPECT_EQ(request.sampling.top_logprobs, 0);
  expect_param(completion_error(R"("prompt":"x","logprobs":6)"), "logprobs");
  expect_param(completion_error(R"("prompt":"x","logprobs":true)"), "logprobs");
}

TEST(OpenAiRequestTest, ChoicesAndUnsupportedFields) {
  EXPECT_EQ(parse_chat_ok(R"("n":1)").n, 1);
  EXPECT_EQ(parse_chat_ok("").n, 1);
  EXPECT_EQ(parse_chat_ok(R"("n":3)").n, 3);
  EXPECT_EQ(parse_chat_ok(R"("n":128)").n, 128);
  expect_param(chat_error(R"("n":0)"), "n");
  expect_param(chat_error(R"("n":129)"), "n");
  expect_param(chat_error(R"("n":"2")"), "n");
  expect_param(chat_error(R"("response_format":{"type":"xml"})"), "response_format");
  expect_param(completion_error(R"("prompt":"x","echo":true)"), "echo");
  expect_param(completion_error(R"("prompt":"x","best_of":3)"), "best_of");
  expect_param(completion_error(R"("prompt":"x","suffix":"end")"), "suffix");
}

TEST(OpenAiRequestTest, ResponseFormatBecomesAConstraint) {
  EXPECT_FALSE(parse_chat_ok(R"("response_format":{"type":"text"})").constraint);
  std::optional<ConstraintSpec> spec =
      parse_chat_ok(R"("response_format":{"type":"json_object"})").constraint;
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, ConstraintSpec::Kind::kJsonObject);
  spec = parse_chat_ok(R"("response_format":{"type":"json_schema","json_schema":{"name":"x",)"
                       R"("strict":true,"schema":{"type":"object","properties":{}}}})")
             .constraint;
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, ConstraintSpec::Kind::kJsonSchema);
  EXPECT_EQ(spec->source, R"({"type":"object","properties":{}})");
  spec = parse_chat_ok(R"("response_format":{"type":"regex","regex":"[ab]+"})").constraint;
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, ConstraintSpec::Kind::kRegex);
  EXPECT_EQ(spec->source, "[ab]+");
  spec = parse_chat_ok(R"("response_format":{"type":"grammar","grammar":"root ::= \"a\""})")
             .constraint;
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, ConstraintSpec::Kind::kGrammar);
  EXPECT_EQ(spec->source, R"(root ::= "a")");

  expect_param(chat_error(R"("response_format":"json")"), "response_format");
  expect_param(chat_error(R"("response_format":{"type":"json_schema"})"),
               "response_format.json_schema");
  expect_param(chat_error(R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})"),
               "response_format.json_schema.schema");
  expect_param(
      chat_error(R"("response_format":{"type":"json_schema","json_schema":{"schema":[1]}})"),
      "response_format.json_schema.schema");
  expect_param(chat_error(R"("response_format":{"type":"json_schema","json_schema":)"
                          R"({"schema":{},"strict":"yes"}})"),
               "response_format.json_schema.strict");
  expect_param(chat_error(R"("response_format":{"type":"regex"})"), "response_format.regex");
  expect_param(chat_error(R"("response_format":{"type":"grammar","grammar":""})"),
               "response_format.grammar");
}

// tools / tool_choice / parallel_tool_calls: checked and turned into a ToolRequest; bad
// input is a 400 naming the field; the legacy function-calling fields are refused.
TEST(OpenAiRequestTest, ToolsAreParsedAndChecked) {
  const std::string tool =
      R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",)"
      R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},)"
      R"({"type":"function","function":{"name":"noop"}}])";
  OpenAiRequest request = parse_chat_ok(tool);
  ASSERT_TRUE(request.tools);
  EXPECT_EQ(request.tools->choice, ToolRequest::Choice::kAuto);
  EXPECT_EQ(request.tools->tools.size(), 2u);
  EXPECT_TRUE(request.tools->parallel);
  request = parse_chat_ok(tool + R"(,"tool_choice":"required","parallel_tool_calls":false)");
  ASSERT_TRUE(request.tools);
  EXPECT_EQ(request.tools->choice, ToolRequest::Choice::kRequired);
  EXPECT_FALSE(request.tools->parallel);
  request = parse_chat_ok(tool + R"(,"tool_choice":{"type":"function","function":{"name":"noop"}})");
  ASSERT_TRUE(request.tools);
  EXPECT_EQ(request.tools->choice, ToolRequest::Choice::kNamed);
  EXPECT_EQ(request.tools->named, "noop");
  // Tools the client forbids, or none at all: a text answer.
  EXPECT_FALSE(parse_chat_ok(tool + R"(,"tool_choice":"none")").tools);
  EXPECT_FALSE(parse_chat_ok(R"("tools":[],"tool_choice":"auto")").tools);
  EXPECT_FALSE(parse_chat_ok(R"("tools":null)").tools);

  expect_param(chat_error(R"("tools":{})"), "tools");
  expect_param(chat_error(R"("tools":[{"type":"retrieval"}])"), "tools[0].type");
  expect_param(chat_error(R"("tools":[{"type":"function"}])"), "tools[0].function");
  expect_param(chat_error(R"("tools":[{"type":"function","function":{"description":"x"}}])"),
               "tools[0].function.name");
  expect_param(chat_error(R"("tools":[{"type":"function","function":{"name":"a b"}}])"),
               "tools[0].function.name");
  expect_param(chat_error(R"("tools":[{"type":"function","function":{"name":"f"}},)"
                          R"({"type":"function","function":{"name":"f"}}])"),
               "tools[1].function.name");
  expect_param(chat_error(R"("tools":[{"type":"function","function":{"name":"f",)"
                          R"("parameters":[1]}}])"),
               "tools[0].function.parameters");
  const ApiError unenforced = chat_error(
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"array",)"
      R"("uniqueItems":true}}}])");
  expect_param(unenforced, "tools[0].function.parameters");
  EXPECT_NE(unenforced.message.find("uniqueItems"), std::string::npos) << unenforced.message;
  expect_param(chat_error(R"("tool_choice":"required")"), "tool_choice");
  expect_param(chat_error(R"("tool_choice":{"type":"function","function":{"name":"f"}})"),
               "tool_choice");
  expect_param(chat_error(tool + R"(,"tool_choice":{"type":"function","function":{"name":"x"}})"),
               "tool_choice");
  expect_param(chat_error(tool + R"(,"tool_choice":"sometimes")"), "tool_choice");
  expect_param(chat_error(tool + R"(,"parallel_tool_calls":"yes")"), "parallel_tool_calls");
  // Both: the answer is the calls or that format (server/tool_calling.h).
  const OpenAiRequest both = parse_chat_ok(tool + R"(,"response_format":{"type":"json_object"})");
  EXPECT_TRUE(both.tools.has_value());
  EXPECT_TRUE(both.constraint.has_value());
  expect_param(completion_error(R"("prompt":"x",)" + tool), "tools");
  expect_param(chat_error(R"("functions":[{"name":"f"}])"), "functions");
  expect_param(chat_error(R"("function_call":{"name":"f"})"), "function_call");
}

TEST(OpenAiRequestTest, StreamOptionsPriorityAndSalt) {
  OpenAiRequest request =
      parse_chat_ok(R"("stream":true,"stream_options":{"include_usage":true},"cache_salt":"s1")");
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  EXPECT_EQ(request.cache_salt, "s1");
  expect_param(chat_error(R"("stream":"yes")"), "stream");
  expect_param(chat_error(R"("stream_options":true)"), "stream_options");
  expect_param(chat_error(R"("stream_options":{"include_usage":"y"})"),
               "stream_options.include_usage");
  expect_param(chat_error(R"("cache_salt":1)"), "cache_salt");

  EXPECT_EQ(parse_chat_ok(R"("priority":"high")").priority, Priority::kHigh);
  EXPECT_EQ(parse_chat_ok(R"("priority":"low")").priority, Priority::kLow);
  EXPECT_EQ(parse_chat_ok(R"("priority":-5)").priority, Priority::kHigh);
  EXPECT_EQ(parse_chat_ok(R"("priority":0)").priority, Priority::kNormal);
  EXPECT_EQ(parse_chat_ok(R"("priority":3)").priority, Priority::kLow);
  expect_param(chat_error(R"("priority":"urgent")"), "priority");
  expect_param(chat_error(R"("priority":[1])"), "priority");
}

TEST(OpenAiRequestTest, UnknownFieldsAreIgnored) {
  OpenAiRequest request = parse_chat_ok(
      R"("user":"u","store":false,"metadata":{"a":"b"},"service_tier":"auto","parallel_tool_calls":true,"some_future_field":[1,2])");
  EXPECT_EQ(request.model, "m");
}

TEST(OpenAiRequestTest, CompletionPrompts) {
  OpenAiRequest request;
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"once"})", request));
  EXPECT_EQ(request.prompt_text.value_or(""), "once");
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":["upon"]})", request));
  EXPECT_EQ(request.prompt_text.value_or(""), "upon");
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2,3]})", request));
  EXPECT_FALSE(request.prompt_text);
  EXPECT_EQ(request.prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[[4,5]]})", request));
  EXPECT_EQ(request.prompt_tokens, (std::vector<TokenId>{4, 5}));
  EXPECT_EQ(request.endpoint, Endpoint::kCompletions);

  expect_param(completion_error(R"("max_tokens":3)"), "prompt");
  expect_param(completion_error(R"("prompt":["a","b"])"), "prompt");
  expect_param(completion_error(R"("prompt":[[1],[2]])"), "prompt");
  expect_param(completion_error(R"("prompt":[])"), "prompt");
  expect_param(completion_error(R"("prompt":5)"), "prompt");
  expect_param(completion_error(R"("prompt":[1,-2])"), "prompt");
  expect_param(completion_error(R"("prompt":[1,"a"])"), "prompt");
  expect_param(completion_error(R"("prompt":[{}])"), "prompt");
}

}  // namespace
}  // namespace tachyon::server
