#include "server/engine_request_builder.h"

#include <fmt/format.h>

namespace tachyon::server {
namespace {

constexpr int32_t kDefaultCompletionMaxTokens = 16;

std::optional<ApiError> tokenize_chat(const OpenAiRequest& request, const ServedModel& model,
                                      std::vector<TokenId>& out) {
  if (model.chat_template == nullptr) {
    return ApiError::invalid_request(
        fmt::format("The model `{}` has no chat template; use /v1/completions", model.id),
        "messages", "unsupported_value");
  }
  ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.add_generation_prompt = true;
  inputs.bos_token = model.bos_token;
  inputs.eos_token = model.eos_token;
  Result<std::string> text = model.chat_template->render(inputs);
  if (!text.ok()) {
    return ApiError::invalid_request(
        fmt::format("The chat template rejected the messages: {}", text.status().message()),
        "messages", "invalid_value");
  }
  // The template spells out BOS where the model wants one.
  out = model.tokenizer->encode(*text, {.parse_special = true, .add_special = false});
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
                                             EngineRequest& out) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const char* prompt_param = chat ? "messages" : "prompt";
  out = EngineRequest();
  if (auto error = chat ? tokenize_chat(request, model, out.prompt)
                        : tokenize_prompt(request, model, out.prompt)) {
    return error;
  }
  if (out.prompt.empty()) {
    return ApiError::invalid_request(fmt::format("The {} produced no tokens", prompt_param),
                                     prompt_param, "invalid_value");
  }
  const int64_t num_prompt = static_cast<int64_t>(out.prompt.size());
  const int64_t max_context = model.max_context;
  const char* what = chat ? "messages" : "prompt";
  // The engine needs room for at least one generated token.
  if (num_prompt + 1 > max_context) {
    return ApiError::invalid_request(
        fmt::format("This model's maximum context length is {} tokens. However, your {} "
                    "resulted in {} tokens. Please reduce the length of the {}.",
                    max_context, what, num_prompt, what),
        prompt_param, "context_length_exceeded");
  }
  out.sampling = request.sampling;
  if (out.sampling.max_tokens) {
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
  out.skip_special_tokens = true;
  return std::nullopt;
}

}  // namespace tachyon::server
