#include "server/engine_request_builder.h"

#include <algorithm>

#include <fmt/format.h>

#include "chat/conversation_fit.h"
#include "server/tool_calling.h"

namespace tachyon::server {
namespace {

constexpr int32_t kDefaultCompletionMaxTokens = 16;

Result<std::vector<TokenId>> render_chat(const boost::json::array& messages,
                                         const ServedModel& model, const ToolRequest* tools) {
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  prepare_tool_conversation(model.tool_format, tools, inputs.messages, inputs.tools);
  inputs.add_generation_prompt = true;
  inputs.bos_token = model.bos_token;
  inputs.eos_token = model.eos_token;
  TACHYON_ASSIGN_OR_RETURN(std::string text, model.chat_template->render(inputs));
  // The template spells out BOS where the model wants one.
  return model.tokenizer->encode(text, {.parse_special = true, .add_special = false});
}

ApiError template_error(const Status& status) {
  return ApiError::invalid_request(
      fmt::format("The chat template rejected the messages: {}", status.message()), "messages",
      "invalid_value");
}

// The chat's prompt; with `max_prompt` set, its oldest turns dropped until it has at most that
// many tokens (fit_conversation).
std::optional<ApiError> tokenize_chat(const OpenAiRequest& request, const ServedModel& model,
                                      std::optional<int64_t> max_prompt, std::vector<TokenId>& out,
                                      PromptTruncation& truncation) {
  if (model.chat_template == nullptr) {
    return ApiError::invalid_request(
        fmt::format("The model `{}` has no chat template; use /v1/completions", model.id),
        "messages", "unsupported_value");
  }
  if (!max_prompt) {
    Result<std::vector<TokenId>> tokens = render_chat(request.messages, model, request.tools ? &*request.tools : nullptr);
    if (!tokens.ok()) return template_error(tokens.status());
    out = std::move(*tokens);
    return std::nullopt;
  }
  Status render_error;  // the template's own failure, told apart from "too long"
  auto render_tokens = [&](const boost::json::array& messages) -> Result<std::vector<int32_t>> {
    Result<std::vector<TokenId>> tokens = render_chat(messages, model, request.tools ? &*request.tools : nullptr);
    if (!tokens.ok()) render_error = tokens.status();
    return tokens;
  };
  Result<FittedConversation> fitted =
      fit_conversation(request.messages, *max_prompt, render_tokens);
  if (!render_error.ok()) return template_error(render_error);
  if (!fitted.ok()) {
    return ApiError::invalid_request(
        fmt::format("This model's maximum context length is {} tokens and context_overflow is "
                    "\"truncate\", but {}. Please reduce the length of the messages or "
                    "completion.",
                    model.max_context, fitted.status().message()),
        "messages", "context_length_exceeded");
  }
  out = std::move(fitted->prompt);
  truncation.dropped_tokens = fitted->dropped_tokens;
  truncation.dropped_messages = fitted->dropped_messages;
  return std::nullopt;
}

std::optional<ApiError> tokenize_prompt(const OpenAiRequest& request, const ServedModel& model,
                                        std::vector<TokenId>& out) {
  if (request.prompt_text) {
    out =
        model.tokenizer->encode(*request.prompt_text, {.parse_special = true, .add_special = true});
    return std::nullopt;
  }
  for (TokenId id : request.prompt_tokens) {
    if (!model.tokenizer->is_valid(id)) {
      return ApiError::invalid_request(
          fmt::format("'prompt' token id {} is outside the vocabulary of {} tokens", id,
                      model.tokenizer->vocabulary_size()),
          "prompt", "invalid_value");
    }
  }
  out = request.prompt_tokens;
  return std::nullopt;
}

}  // namespace

std::string param_of_validation_message(const std::string& message) {
  size_t end = 0;
  while (end < message.size() &&
         (std::islower(static_cast<unsigned char>(message[end])) || message[end] == '_')) {
    ++end;
  }
  return message.substr(0, end);
}

std::optional<ApiError> build_engine_request(const OpenAiRequest& request, const ServedModel& model,
                                             EngineRequest& out, PromptTruncation* truncation) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const char* prompt_param = chat ? "messages" : "prompt";
  const int64_t max_context = model.max_context;
  out = EngineRequest();
  PromptTruncation dropped;
  // With `truncate`, the most prompt tokens that leave room for the completion.
  std::optional<int64_t> max_prompt;
  if (request.context_overflow.value_or(model.context_overflow) == ContextOverflow::kTruncate) {
    const int64_t room = request.sampling.max_tokens ? *request.sampling.max_tokens
                                                     : std::max<int64_t>(1, max_context / 4);
    if (room < max_context) max_prompt = max_context - room;
  }
  if (auto error = chat ? tokenize_chat(request, model, max_prompt, out.prompt, dropped)
                        : tokenize_prompt(request, model, out.prompt)) {
    return error;
  }
  if (out.prompt.empty()) {
    return ApiError::invalid_request(fmt::format("The {} produced no tokens", prompt_param),
                                     prompt_param, "invalid_value");
  }
  if (!chat && max_prompt && static_cast<int64_t>(out.prompt.size()) > *max_prompt) {
    // The oldest tokens go; a leading BOS stays (the model expects its sequence to start so).
    const std::optional<TokenId> bos = model.tokenizer->vocabulary().bos_id;
    const int64_t keep_first = bos && out.prompt.front() == *bos && *max_prompt > 1 ? 1 : 0;
    dropped.dropped_tokens = static_cast<int64_t>(out.prompt.size()) - *max_prompt;
    out.prompt.erase(out.prompt.begin() + keep_first,
                     out.prompt.begin() + keep_first + dropped.dropped_tokens);
  }
  if (truncation != nullptr) *truncation = dropped;
  const int64_t num_prompt = static_cast<int64_t>(out.prompt.size());
  const char* what = chat ? "messages" : "prompt";
  out.sink = request.context_overflow.value_or(model.context_overflow) == ContextOverflow::kSink;
  out.sampling = request.sampling;
  if (out.sink) {
    // Any length fits: the engine keeps the first block and a recent window. Without
    // max_tokens, a chat may write a window's worth.
    if (!out.sampling.max_tokens) {
      out.sampling.max_tokens = static_cast<int32_t>(
          chat ? max_context : std::min<int64_t>(max_context, kDefaultCompletionMaxTokens));
    }
  } else if (num_prompt + 1 > max_context) {
    // The engine needs room for at least one generated token.
    return ApiError::invalid_request(
        fmt::format("This model's maximum context length is {} tokens. However, your {} "
                    "resulted in {} tokens. Please reduce the length of the {}.",
                    max_context, what, num_prompt, what),
        prompt_param, "context_length_exceeded");
  } else if (out.sampling.max_tokens) {
    const int64_t wanted = *out.sampling.max_tokens;
    if (num_prompt + wanted > max_context) {
      return ApiError::invalid_request(
          fmt::format("This model's maximum context length is {} tokens. However, you requested "
                      "{} tokens ({} in the {}, {} in the completion). Please reduce the length "
                      "of the {} or completion.",
                      max_context, num_prompt + wanted, num_prompt, what, wanted, what),
          prompt_param, "context_length_exceeded");
    }
  } else {
    const int64_t room = max_context - num_prompt;
    out.sampling.max_tokens =
        static_cast<int32_t>(chat ? room : std::min<int64_t>(room, kDefaultCompletionMaxTokens));
  }
  if (Status status = out.sampling.validate(model.tokenizer->vocabulary_size()); !status.ok()) {
    std::string param = param_of_validation_message(status.message());
    return ApiError::invalid_request(
        status.message(), param.empty() ? std::nullopt : std::optional(param), "invalid_value");
  }
  out.priority = request.priority;
  out.cache_salt = request.cache_salt;
  out.speculate = request.speculative;
  // The tool-call parser needs the markers that are special tokens; end-of-generation tokens
  // never reach the text either way.
  out.skip_special_tokens = !(request.tools && tool_markers_are_special(model.tool_format));
  return std::nullopt;
}

}  // namespace tachyon::server
