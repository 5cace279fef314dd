#include "router/request_summary.h"

#include <algorithm>

#include <boost/json.hpp>

namespace tachyon::router {
namespace {

namespace json = boost::json;

// A completion without max_tokens is guessed at this many tokens.
constexpr int64_t kDefaultCompletionTokens = 256;
constexpr int64_t kBytesPerToken = 4;
// A cap beyond any context counts as this (a client's huge number must not overflow the load).
constexpr int64_t kMaxCompletionTokens = int64_t{1} << 24;

// Separators that do not occur in JSON text, so fields cannot run into each other.
constexpr char kFieldEnd = '\x1f';
constexpr char kMessageEnd = '\x1e';

void append_content(std::string& out, const json::value& content) {
  if (content.is_string()) {
    out += content.get_string();
  } else if (content.is_array()) {  // parts: text in order, others by their JSON
    for (const json::value& part : content.get_array()) {
      const json::object* fields = part.if_object();
      const json::value* text = fields != nullptr ? fields->if_contains("text") : nullptr;
      if (text != nullptr && text->is_string()) {
        out += text->get_string();
      } else {
        out += json::serialize(part);
      }
    }
  } else if (!content.is_null()) {
    out += json::serialize(content);
  }
}

int64_t completion_cap(const json::object& body) {
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    const json::value* value = body.if_contains(name);
    if (value != nullptr && value->is_int64() && value->get_int64() > 0) {
      return std::min(value->get_int64(), kMaxCompletionTokens);
    }
  }
  return kDefaultCompletionTokens;
}

}  // namespace

RequestSummary summarize_request(std::string_view path, std::string_view body) {
  RequestSummary summary;
  boost::system::error_code error;
  json::value parsed = json::parse(body, error);
  if (error || !parsed.is_object()) return summary;
  const json::object& fields = parsed.get_object();
  if (const json::value* model = fields.if_contains("model"); model && model->is_string()) {
    summary.model = std::string(model->get_string());
  }
  std::string& text = summary.prefix_text;
  // The model first: the same prompt to two models is two different prefixes.
  text += summary.model;
  text += kMessageEnd;
  if (path == "/v1/chat/completions") {
    if (const json::value* tools = fields.if_contains("tools"); tools && !tools->is_null()) {
      text += json::serialize(*tools);
      text += kMessageEnd;
    }
    if (const json::value* messages = fields.if_contains("messages"); messages && messages->is_array()) {
      for (const json::value& message : messages->get_array()) {
        const json::object* entry = message.if_object();
        if (entry == nullptr) continue;
        for (const char* name : {"role", "name", "content", "tool_calls", "tool_call_id"}) {
          const json::value* value = entry->if_contains(name);
          if (value == nullptr) continue;
          append_content(text, *value);
          text += kFieldEnd;
        }
        text += kMessageEnd;
      }
    }
  } else if (path == "/v1/completions") {
    if (const json::value* prompt = fields.if_contains("prompt")) append_content(text, *prompt);
  }
  int64_t choices = 1;
  if (const json::value* n = fields.if_contains("n"); n && n->is_int64() && n->get_int64() > 1) {
    choices = std::min<int64_t>(n->get_int64(), 128);
  }
  summary.estimated_tokens =
      static_cast<int64_t>(text.size() - summary.model.size() - 1) / kBytesPerToken + choices * completion_cap(fields);
  return summary;
}

}  // namespace tachyon::router
