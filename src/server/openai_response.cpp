#include "server/openai_response.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

namespace tachyon::server {
namespace {

namespace json = boost::json;

// JSON has no infinities; OpenAI reports impossible tokens as -9999.
constexpr double kMinLogprob = -9999.0;

double finite_logprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : kMinLogprob;
}

json::value finish_reason_json(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return json::string(finish_reason_name(reason));
}

// Length of the valid UTF-8 sequence starting at bytes[i], or 0 when it is not one.
size_t utf8_sequence_length(const std::string& bytes, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  uint32_t min_code = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0)
    length = 2, min_code = 0x80;
  else if ((lead & 0xF0) == 0xE0)
    length = 3, min_code = 0x800;
  else if ((lead & 0xF8) == 0xF0)
    length = 4, min_code = 0x10000;
  else
    return 0;
  if (i + length > bytes.size()) return 0;
  uint32_t code = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

int64_t count_characters(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

}  // namespace

std::string random_hex(int count) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(count);
  uint64_t bits = 0;
  for (int i = 0; i < count; ++i) {
    if (i % 16 == 0) bits = generator();
    out += kDigits[bits & 0xF];
    bits >>= 4;
  }
  return out;
}

std::string printable_token_text(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const size_t length = utf8_sequence_length(bytes, i);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(bytes[i]));
      ++i;
    } else {
      out.append(bytes, i, length);
      i += length;
    }
  }
  return out;
}

json::object Usage::to_json() const {
  json::object prompt_details = {{"cached_tokens", cached_tokens}};
  if (dropped_tokens > 0) {
    prompt_details["dropped_tokens"] = dropped_tokens;
    prompt_details["dropped_messages"] = dropped_messages;
  }
  return {
      {"prompt_tokens", prompt_tokens},
      {"completion_tokens", completion_tokens},
      {"total_tokens", prompt_tokens + completion_tokens},
      {"prompt_tokens_details", std::move(prompt_details)},
      {"completion_tokens_details", {{"reasoning_tokens", 0}}},
  };
}

ResponseBuilder::ResponseBuilder(Endpoint endpoint, std::string model_id,
                                 const Tokenizer& tokenizer, bool include_usage)
    : endpoint_(endpoint),
      model_id_(std::move(model_id)),
      tokenizer_(tokenizer),
      include_usage_(include_usage),
      id_((endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") + random_hex(24)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

json::object ResponseBuilder::header(const char* object) const {
  return {
      {"id", id_},
      {"object", object},
      {"created", created_},
      {"model", model_id_},
      {"system_fingerprint", kSystemFingerprint},
  };
}

json::object ResponseBuilder::chat_token_json(const TokenLogprob& entry) const {
  const std::string bytes =
      tokenizer_.is_valid(entry.token) ? tokenizer_.token_bytes(entry.token) : std::string();
  json::array byte_values;
  for (unsigned char c : bytes) byte_values.push_back(c);
  return {
      {"token", printable_token_text(bytes)},
      {"logprob", finite_logprob(entry.logprob)},
      {"bytes", std::move(byte_values)},
  };
}

json::value ResponseBuilder::logprobs_json(const std::vector<SampleLogprobs>& logprobs,
                                           int index) {
  if (endpoint_ == Endpoint::kChatCompletions) {
    json::array content;
    for (const SampleLogprobs& sample : logprobs) {
      json::object entry = chat_token_json(sample.chosen);
      json::array top;
      for (const TokenLogprob& alternative : sample.top)
        top.push_back(chat_token_json(alternative));
      entry["top_logprobs"] = std::move(top);
      content.push_back(std::move(entry));
    }
    return json::object{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json::array tokens, token_logprobs, top_logprobs, text_offset;
  for (const SampleLogprobs& sample : logprobs) {
    const std::string text = tokenizer_.is_valid(sample.chosen.token)
                                 ? printable_token_text(tokenizer_.token_bytes(sample.chosen.token))
                                 : std::string();
    tokens.push_back(json::string(text));
    token_logprobs.push_back(finite_logprob(sample.chosen.logprob));
    json::object top;
    for (const TokenLogprob& alternative : sample.top) {
      if (!tokenizer_.is_valid(alternative.token)) continue;
      top[printable_token_text(tokenizer_.token_bytes(alternative.token))] =
          finite_logprob(alternative.logprob);
    }
    top_logprobs.push_back(std::move(top));
    if (text_offsets_.size() <= static_cast<size_t>(index)) text_offsets_.resize(index + 1, 0);
    int64_t& offset = text_offsets_[static_cast<size_t>(index)];
    text_offset.push_back(offset);
    offset += count_characters(text);
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(text_offset)}};
}

json::object ResponseBuilder::response(const std::string& text, bool want_logprobs,
                                       const std::vector<SampleLogprobs>& logprobs,
                                       FinishReason finish_reason, const Usage& usage) {
  return response(std::vector<Choice>{Choice{text, logprobs, finish_reason, {}}}, want_logprobs,
                  usage);
}

json::object ResponseBuilder::response(const std::vector<Choice>& choices, bool want_logprobs,
                                       const Usage& usage) {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  json::array out_choices;
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& from = choices[i];
    json::object choice;
    choice["index"] = i;
    if (chat) {
      json::object message{{"role", "assistant"}, {"content", from.text}, {"refusal", nullptr}};
      if (!from.tool_calls.empty()) {
        if (from.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = from.tool_calls;
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = from.text;
    }
    choice["logprobs"] = want_logprobs ? logprobs_json(from.logprobs, static_cast<int>(i))
                                       : json::value(nullptr);
    choice["finish_reason"] = !from.tool_calls.empty() && from.finish_reason == FinishReason::kStop
                                  ? json::value("tool_calls")
                                  : finish_reason_json(from.finish_reason);
    out_choices.push_back(std::move(choice));
  }
  json::object out = header(chat ? "chat.completion" : "text_completion");
  out["choices"] = std::move(out_choices);
  out["usage"] = usage.to_json();
  return out;
}

json::object ResponseBuilder::chunk_with_choice(json::object choice) const {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  json::object out = header(chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array{std::move(choice)};
  if (include_usage_) out["usage"] = nullptr;
  return out;
}

json::object ResponseBuilder::role_chunk(int index) const {
  return chunk_with_choice({{"index", index},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}});
}

json::object ResponseBuilder::text_chunk(const std::string& text, bool want_logprobs,
                                         const std::vector<SampleLogprobs>& logprobs, int index) {
  json::value logprobs_value =
      want_logprobs ? logprobs_json(logprobs, index) : json::value(nullptr);
  if (endpoint_ == Endpoint::kChatCompletions) {
    return chunk_with_choice({{"index", index},
                              {"delta", {{"content", text}}},
                              {"logprobs", std::move(logprobs_value)},
                              {"finish_reason", nullptr}});
  }
  return chunk_with_choice({{"text", text},
                            {"index", index},
                            {"logprobs", std::move(logprobs_value)},
                            {"finish_reason", nullptr}});
}

json::object ResponseBuilder::finish_chunk(FinishReason finish_reason, int index,
                                           bool tool_calls) const {
  const json::value reason = tool_calls && finish_reason == FinishReason::kStop
                                 ? json::value("tool_calls")
                                 : finish_reason_json(finish_reason);
  if (endpoint_ == Endpoint::kChatCompletions) {
    return chunk_with_choice({{"index", index},
                              {"delta", json::object()},
                              {"logprobs", nullptr},
                              {"finish_reason", reason}});
  }
  return chunk_with_choice({{"text", ""},
                            {"index", index},
                            {"logprobs", nullptr},
                            {"finish_reason", reason}});
}

json::object ResponseBuilder::tool_call_chunk(int index, int call_index, const std::string* id,
                                              const std::string* name,
                                              const std::string& arguments) const {
  json::object function{{"arguments", arguments}};
  json::object call{{"index", call_index}};
  if (id != nullptr) {
    call["id"] = *id;
    call["type"] = "function";
  }
  if (name != nullptr) function["name"] = *name;
  call["function"] = std::move(function);
  return chunk_with_choice({{"index", index},
                            {"delta", {{"tool_calls", json::array{std::move(call)}}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}});
}

json::object ResponseBuilder::usage_chunk(const Usage& usage) const {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  json::object out = header(chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage.to_json();
  return out;
}

std::string ResponseBuilder::sse_event(const json::value& value) {
  std::string out = "data: ";
  out += json::serialize(value);
  out += "\n\n";
  return out;
}

}  // namespace tachyon::server
