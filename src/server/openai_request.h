// OpenAiRequest: a POST /v1/chat/completions or /v1/completions body, checked field by field
// and turned into native values. Wrong types and out-of-range values become a 400 ApiError
// that names the field in `param`; fields tachyon does not know are ignored (SDK upgrades add
// fields all the time).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "structured/constraint_spec.h"
#include "runtime/engine_request.h"
#include "sampling/sampling_params.h"
#include "server/api_error.h"

namespace tachyon::server {

enum class Endpoint { kChatCompletions, kCompletions };

// What a request whose prompt and max_tokens outgrow the context gets (tachyon's extension
// "context_overflow"; the server's --context-overflow sets the default): `error`, OpenAI's 400
// context_length_exceeded; `truncate`, the oldest turns dropped (chat: the system messages and
// the last user turn stay; completions: the prompt's oldest tokens after BOS go); `sink`
// (StreamingLLM), the prompt's first block and a recent window stay in the KV cache and
// generation runs on past the context (EngineRequest::sink).
enum class ContextOverflow { kError, kTruncate, kSink };
std::optional<ContextOverflow> parse_context_overflow(std::string_view name);

// tools / tool_choice / parallel_tool_calls, when the model may call tools (tool_choice not
// "none" and tools given).
struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  boost::json::array tools;  // OpenAI tool objects, checked (names, parameter schemas)
  Choice choice = Choice::kAuto;
  std::string named;     // kNamed: the function it must call
  bool parallel = true;  // parallel_tool_calls: more than one call per answer
  static constexpr size_t kMaxTools = 256;
};

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  // Chat: messages ready for the chat template: "developer" became "system", content arrays
  // were joined into one string, other keys (name, tool_calls, tool_call_id) kept.
  boost::json::array messages;
  // Completions: the prompt as text, or as token ids.
  std::optional<std::string> prompt_text;
  std::vector<TokenId> prompt_tokens;
  // max_tokens is set only when the client gave max_tokens / max_completion_tokens (the
  // smaller of the two when both); logprobs/top_logprobs hold the request's choice.
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  Priority priority = Priority::kNormal;
  std::string cache_salt;
  // tachyon's extension "speculative": false opts out of the server's speculative decoding
  // (the output is the same either way).
  bool speculative = true;
  // "context_overflow": unset = the server's default.
  std::optional<ContextOverflow> context_overflow;
  // response_format other than "text": what the output must match.
  std::optional<ConstraintSpec> constraint;
  std::optional<ToolRequest> tools;
  // Choices to generate (n): independent samples of the same prompt, computed once.
  int n = 1;
  static constexpr int kMaxChoices = 128;  // as OpenAI
};

// Parses the body as JSON: 400 with a position on malformed JSON, 400 when it is not an object.
std::optional<ApiError> parse_json_body(std::string_view body, boost::json::value& out);

// Checks and converts one request body; nullopt on success.
std::optional<ApiError> parse_openai_request(Endpoint endpoint, const boost::json::value& body,
                                             OpenAiRequest& out);

}  // namespace tachyon::server
