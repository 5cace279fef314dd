#include "server/openai_request.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "structured/json_schema_check.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace tachyon::server {
namespace {

namespace json = boost::json;

// Reads optional fields of one JSON object; the first problem is kept in `error` and later
// reads return nullopt. A field that is missing or null counts as not given.
class FieldReader {
 public:
  explicit FieldReader(const json::object& object) : object_(object) {}

  std::optional<ApiError> error;

  const json::value* find(std::string_view key) const {
    if (error) return nullptr;
    const json::value* value = object_.if_contains(key);
    if (value == nullptr || value->is_null()) return nullptr;
    return value;
  }

  std::optional<bool> boolean(std::string_view key) {
    const json::value* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_bool()) return fail(ApiError::wrong_type(std::string(key), "a boolean", *value));
    return value->get_bool();
  }

  std::optional<std::string> string(std::string_view key) {
    const json::value* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string())
      return fail(ApiError::wrong_type(std::string(key), "a string", *value));
    return std::string(value->get_string());
  }

  // A number in [low, high].
  std::optional<double> number(std::string_view key, double low, double high) {
    const json::value* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number())
      return fail(ApiError::wrong_type(std::string(key), "a number", *value));
    const double x = value->to_number<double>();
    if (!(x >= low && x <= high)) {
      return fail(ApiError::invalid_request(
          fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, x), std::string(key),
          "invalid_value"));
    }
    return x;
  }

  // An integer (an integral double such as 5.0 is accepted) in [low, high].
  std::optional<int64_t> integer(std::string_view key, int64_t low, int64_t high) {
    const json::value* value = find(key);
    if (value == nullptr) return std::nullopt;
    std::optional<int64_t> x = as_integer(*value);
    if (!x) return fail(ApiError::wrong_type(std::string(key), "an integer", *value));
    if (*x < low || *x > high) {
      return fail(ApiError::invalid_request(
          fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, *x), std::string(key),
          "invalid_value"));
    }
    return x;
  }

  static std::optional<int64_t> as_integer(const json::value& value) {
    if (value.is_int64()) return value.get_int64();
    if (value.is_uint64()) {
      if (value.get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return std::numeric_limits<int64_t>::max();
      }
      return static_cast<int64_t>(value.get_uint64());
    }
    if (value.is_double()) {
      const double x = value.get_double();
      if (x == std::floor(x) && std::fabs(x) < 9.0e18) return static_cast<int64_t>(x);
    }
    return std::nullopt;
  }

  std::nullopt_t fail(ApiError api_error) {
    if (!error) error = std::move(api_error);
    return std::nullopt;
  }

 private:
  const json::object& object_;
};

ApiError invalid_value(std::string message, std::string param) {
  return ApiError::invalid_request(std::move(message), std::move(param), "invalid_value");
}

// One chat message → the shape chat templates read.
std::optional<ApiError> normalize_message(const json::value& value, size_t index,
                                          json::array& out) {
  const std::string where = fmt::format("messages[{}]", index);
  if (!value.is_object()) return ApiError::wrong_type(where, "an object", value);
  const json::object& message = value.get_object();
  const json::value* role_value = message.if_contains("role");
  if (role_value == nullptr || !role_value->is_string()) {
    return ApiError::invalid_request(
        fmt::format("'{}.role' is required and must be a string", where), where + ".role",
        "invalid_value");
  }
  std::string role(role_value->get_string());
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    return invalid_value(
        fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got '{}'",
                    where, role_value->get_string().c_str()),
        where + ".role");
  }
  json::object normalized;
  normalized["role"] = role;
  const json::value* content = message.if_contains("content");
  if (content == nullptr || content->is_null()) {
    // Assistant turns that only call tools have no content.
    if (role != "assistant") {
      return ApiError::invalid_request(fmt::format("'{}.content' is required", where),
                                       where + ".content", "invalid_value");
    }
    normalized["content"] = "";
  } else if (content->is_string()) {
    normalized["content"] = content->get_string();
  } else if (content->is_array()) {
    std::string joined;
    const json::array& parts = content->get_array();
    for (size_t j = 0; j < parts.size(); ++j) {
      const std::string part_where = fmt::format("{}.content[{}]", where, j);
      const json::object* part = parts[j].if_object();
      const json::value* type = part ? part->if_contains("type") : nullptr;
      if (type == nullptr || !type->is_string()) {
        return ApiError::invalid_request(
            fmt::format("'{}' must be an object with a string 'type'", part_where), part_where,
            "invalid_value");
      }
      if (type->get_string() != "text") {
        return ApiError::invalid_request(
            fmt::format("'{}' has type '{}'; this model accepts only text content parts",
                        part_where, type->get_string().c_str()),
            part_where, "unsupported_content");
      }
      const json::value* text = part->if_contains("text");
      if (text == nullptr || !text->is_string()) {
        return ApiError::invalid_request(fmt::format("'{}.text' must be a string", part_where),
                                         part_where + ".text", "invalid_type");
      }
      if (j > 0) joined += '\n';
      joined += text->get_string();
    }
    normalized["content"] = std::move(joined);
  } else {
    return ApiError::wrong_type(where + ".content", "a string or an array of content parts",
                                *content);
  }
  // Keys templates use for tool turns and named speakers pass through untouched.
  for (const char* key : {"name", "tool_calls", "tool_call_id"}) {
    if (const json::value* extra = message.if_contains(key); extra && !extra->is_null()) {
      normalized[key] = *extra;
    }
  }
  out.push_back(std::move(normalized));
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json::object& body, json::array& out) {
  const json::value* messages = body.if_contains("messages");
  if (messages == nullptr || messages->is_null()) {
    return ApiError::invalid_request("'messages' is required", "messages",
                                     "missing_required_parameter");
  }
  if (!messages->is_array()) return ApiError::wrong_type("messages", "an array", *messages);
  if (messages->get_array().empty()) {
    return invalid_value("'messages' must contain at least one message", "messages");
  }
  const json::array& list = messages->get_array();
  for (size_t i = 0; i < list.size(); ++i) {
    if (auto error = normalize_message(list[i], i, out)) return error;
  }
  return std::nullopt;
}

std::optional<int64_t> token_id(const json::value& value) {
  std::optional<int64_t> id = FieldReader::as_integer(value);
  if (!id || *id < 0 || *id > std::numeric_limits<TokenId>::max()) return std::nullopt;
  return id;
}

std::optional<ApiError> parse_token_ids(const json::array& ids, std::vector<TokenId>& out) {
  for (const json::value& id : ids) {
    std::optional<int64_t> token = token_id(id);
    if (!token) {
      return invalid_value(
          fmt::format("'prompt' token ids must be integers >= 0, got {}", json::serialize(id)),
          "prompt");
    }
    out.push_back(static_cast<TokenId>(*token));
  }
  return std::nullopt;
}

// A string, [string], [int...] or [[int...]]; several prompts in one request are refused.
std::optional<ApiError> parse_prompt(const json::object& body, OpenAiRequest& out) {
  const json::value* prompt = body.if_contains("prompt");
  if (prompt == nullptr || prompt->is_null()) {
    return ApiError::invalid_request("'prompt' is required", "prompt",
                                     "missing_required_parameter");
  }
  if (prompt->is_string()) {
    out.prompt_text = std::string(prompt->get_string());
    return std::nullopt;
  }
  const char* kExpected = "a string, an array of token ids, or an array holding one of those";
  if (!prompt->is_array()) return ApiError::wrong_type("prompt", kExpected, *prompt);
  const json::array& items = prompt->get_array();
  if (items.empty()) return invalid_value("'prompt' must not be an empty array", "prompt");
  if (items[0].is_number()) return parse_token_ids(items, out.prompt_tokens);
  if (items.size() > 1) {
    return ApiError::invalid_request(
        fmt::format("'prompt' holds {} prompts; this server accepts one prompt per request",
                    items.size()),
        "prompt", "unsupported_value");
  }
  if (items[0].is_string()) {
    out.prompt_text = std::string(items[0].get_string());
    return std::nullopt;
  }
  if (items[0].is_array() && !items[0].get_array().empty()) {
    return parse_token_ids(items[0].get_array(), out.prompt_tokens);
  }
  return ApiError::wrong_type("prompt", kExpected, *prompt);
}

std::optional<ApiError> parse_stop(FieldReader& fields, std::vector<std::string>& out) {
  const json::value* stop = fields.find("stop");
  if (stop == nullptr) return std::nullopt;
  if (stop->is_string()) {
    out.emplace_back(stop->get_string());
    return std::nullopt;
  }
  if (!stop->is_array())
    return ApiError::wrong_type("stop", "a string or an array of strings", *stop);
  constexpr size_t kMaxStop = 4;
  if (stop->get_array().size() > kMaxStop) {
    return invalid_value(fmt::format("'stop' may hold at most {} sequences, got {}", kMaxStop,
                                     stop->get_array().size()),
                         "stop");
  }
  for (const json::value& item : stop->get_array()) {
    if (!item.is_string())
      return ApiError::wrong_type("stop", "a string or an array of strings", item);
    out.emplace_back(item.get_string());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_logit_bias(FieldReader& fields, std::map<TokenId, float>& out) {
  const json::value* bias = fields.find("logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return ApiError::wrong_type("logit_bias", "an object", *bias);
  for (const auto& [key, value] : bias->get_object()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    auto [rest, error] = std::from_chars(key.data(), end, id);
    if (error != std::errc() || rest != end || id < 0 || id > std::numeric_limits<TokenId>::max()) {
      return invalid_value(
          fmt::format("'logit_bias' keys must be token ids, got '{}'", std::string_view(key)),
          "logit_bias");
    }
    if (!value.is_number()) return ApiError::wrong_type("logit_bias", "a map of numbers", value);
    const double x = value.to_number<double>();
    if (!(std::fabs(x) <= SamplingParams::kMaxLogitBias)) {
      return invalid_value(
          fmt::format("'logit_bias' for token {} must be in [-100, 100], got {}", id, x),
          "logit_bias");
    }
    out[static_cast<TokenId>(id)] = static_cast<float>(x);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_priority(FieldReader& fields, Priority& out) {
  const json::value* priority = fields.find("priority");
  if (priority == nullptr) return std::nullopt;
  if (priority->is_string()) {
    const json::string& name = priority->get_string();
    if (name == "high")
      out = Priority::kHigh;
    else if (name == "normal")
      out = Priority::kNormal;
    else if (name == "low")
      out = Priority::kLow;
    else {
      return invalid_value(fmt::format("'priority' must be high, normal, low or an integer, got "
                                       "'{}'",
                                       name.c_str()),
                           "priority");
    }
    return std::nullopt;
  }
  // vLLM's convention: lower is more urgent.
  std::optional<int64_t> level = FieldReader::as_integer(*priority);
  if (!level) return ApiError::wrong_type("priority", "a string or an integer", *priority);
  out = *level < 0 ? Priority::kHigh : *level == 0 ? Priority::kNormal : Priority::kLow;
  return std::nullopt;
}

// Fields that would change the answer's meaning if silently ignored.
std::optional<ApiError> refuse_unsupported(FieldReader& fields, Endpoint endpoint) {
  if (endpoint == Endpoint::kCompletions) {
    if (std::optional<int64_t> best_of = fields.integer("best_of", 1, 128);
        best_of && *best_of != 1) {
      return ApiError::invalid_request("'best_of' must be 1", "best_of", "unsupported_value");
    }
    if (fields.boolean("echo").value_or(false)) {
      return ApiError::invalid_request("'echo' is not supported", "echo", "unsupported_value");
    }
    if (std::optional<std::string> suffix = fields.string("suffix"); suffix && !suffix->empty()) {
      return ApiError::invalid_request("'suffix' is not supported", "suffix", "unsupported_value");
    }
  }
  // The legacy function-calling fields: refused rather than ignored.
  for (const char* key : {"functions", "function_call"}) {
    if (fields.find(key) != nullptr) {
      return ApiError::invalid_request(
          fmt::format("'{}' is the deprecated function-calling API; send 'tools' and "
                      "'tool_choice' instead",
                      key),
          std::string(key), "unsupported_value");
    }
  }
  return fields.error;
}

// tools, tool_choice, parallel_tool_calls (chat only).
std::optional<ApiError> parse_tools(FieldReader& fields, Endpoint endpoint,
                                    std::optional<ToolRequest>& out) {
  const json::value* tools = fields.find("tools");
  const json::value* choice = fields.find("tool_choice");
  const bool has_tools = tools != nullptr && !(tools->is_array() && tools->get_array().empty());
  if (endpoint == Endpoint::kCompletions && (has_tools || choice != nullptr)) {
    return ApiError::invalid_request("tools are for /v1/chat/completions",
                                     has_tools ? "tools" : "tool_choice", "unsupported_value");
  }
  ToolRequest request;
  if (tools != nullptr) {
    if (!tools->is_array()) return ApiError::wrong_type("tools", "an array of tools", *tools);
    if (tools->get_array().size() > ToolRequest::kMaxTools) {
      return invalid_value(fmt::format("'tools' holds more than {} tools", ToolRequest::kMaxTools),
                           "tools");
    }
    std::set<std::string> names;
    const json::array& list = tools->get_array();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = fmt::format("tools[{}]", i);
      const json::object* tool = list[i].if_object();
      if (tool == nullptr) return ApiError::wrong_type(where, "an object", list[i]);
      const json::value* type = tool->if_contains("type");
      if (type == nullptr || !type->is_string() || type->get_string() != "function") {
        return ApiError::invalid_request(
            fmt::format("'{}.type' must be \"function\"", where), where + ".type",
            "unsupported_value");
      }
      const json::value* function = tool->if_contains("function");
      if (function == nullptr || !function->is_object()) {
        return ApiError::invalid_request(fmt::format("'{}.function' is required", where),
                                         where + ".function", "invalid_value");
      }
      const json::value* name = function->get_object().if_contains("name");
      const auto valid_name = [](std::string_view text) {
        return !text.empty() && text.size() <= 64 &&
               std::all_of(text.begin(), text.end(), [](char c) {
                 return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
               });
      };
      if (name == nullptr || !name->is_string() || !valid_name(name->get_string())) {
        return ApiError::invalid_request(
            fmt::format("'{}.function.name' is required: 1 to 64 letters, digits, '_' or '-'",
                        where),
            where + ".function.name", "invalid_value");
      }
      if (!names.insert(std::string(name->get_string())).second) {
        return invalid_value(fmt::format("two tools are named '{}'", name->get_string().c_str()),
                             where + ".function.name");
      }
      if (const json::value* description = function->get_object().if_contains("description");
          description != nullptr && !description->is_string() && !description->is_null()) {
        return ApiError::wrong_type(where + ".function.description", "a string", *description);
      }
      if (const json::value* parameters = function->get_object().if_contains("parameters");
          parameters != nullptr && !parameters->is_null()) {
        if (!parameters->is_object()) {
          return ApiError::wrong_type(where + ".function.parameters", "a JSON Schema object",
                                      *parameters);
        }
        if (Status checked = check_json_schema(*parameters); !checked.ok()) {
          return ApiError::from_status(
              Status(checked.code(), fmt::format("'{}.function.parameters': {}", where,
                                                 checked.message())),
              where + ".function.parameters");
        }
      }
    }
    request.tools = list;
  }
  request.choice = has_tools ? ToolRequest::Choice::kAuto : ToolRequest::Choice::kNone;
  if (choice != nullptr) {
    if (choice->is_string()) {
      const std::string_view name = choice->get_string();
      if (name == "none") request.choice = ToolRequest::Choice::kNone;
      else if (name == "auto") request.choice = ToolRequest::Choice::kAuto;
      else if (name == "required") request.choice = ToolRequest::Choice::kRequired;
      else {
        return invalid_value("'tool_choice' must be none, auto, required or "
                             "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                             "tool_choice");
      }
    } else {
      const json::object* object = choice->if_object();
      const json::value* function = object ? object->if_contains("function") : nullptr;
      const json::value* name =
          function && function->is_object() ? function->get_object().if_contains("name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return ApiError::wrong_type("tool_choice",
                                    "none, auto, required or {\"type\": \"function\", "
                                    "\"function\": {\"name\": ...}}",
                                    *choice);
      }
      request.choice = ToolRequest::Choice::kNamed;
      request.named = std::string(name->get_string());
    }
  }
  if (!has_tools && (request.choice == ToolRequest::Choice::kRequired ||
                     request.choice == ToolRequest::Choice::kNamed)) {
    return invalid_value("'tool_choice' asks for a tool call, but 'tools' is empty",
                         "tool_choice");
  }
  if (request.choice == ToolRequest::Choice::kNamed) {
    const bool known = std::any_of(request.tools.begin(), request.tools.end(),
                                   [&](const json::value& tool) {
                                     return tool.at("function").at("name").as_string() ==
                                            request.named;
                                   });
    if (!known) {
      return invalid_value(
          fmt::format("'tool_choice' names '{}', which is not in 'tools'", request.named),
          "tool_choice");
    }
  }
  if (auto parallel = fields.boolean("parallel_tool_calls")) request.parallel = *parallel;
  if (fields.error) return fields.error;
  if (has_tools && request.choice != ToolRequest::Choice::kNone) out = std::move(request);
  return std::nullopt;
}

// response_format: "text", "json_object", "json_schema" (OpenAI), and tachyon's "regex" and
// "grammar" (the text under the key of the same name).
std::optional<ApiError> parse_response_format(FieldReader& fields,
                                              std::optional<ConstraintSpec>& out) {
  const json::value* format = fields.find("response_format");
  if (format == nullptr) return std::nullopt;
  const json::object* object = format->if_object();
  const json::value* type = object ? object->if_contains("type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return ApiError::wrong_type("response_format", "an object with a string 'type'", *format);
  }
  const std::string_view kind = type->get_string();
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    out = ConstraintSpec{ConstraintSpec::Kind::kJsonObject, ""};
    return std::nullopt;
  }
  if (kind == "json_schema") {
    const json::value* spec = object->if_contains("json_schema");
    if (spec == nullptr || !spec->is_object()) {
      return ApiError::wrong_type("response_format.json_schema",
                                  "an object with 'name' and 'schema'",
                                  spec ? *spec : json::value(nullptr));
    }
    const json::value* schema = spec->get_object().if_contains("schema");
    if (schema == nullptr || !(schema->is_object() || schema->is_bool())) {
      return ApiError::wrong_type("response_format.json_schema.schema", "a JSON Schema object",
                                  schema ? *schema : json::value(nullptr));
    }
    if (const json::value* strict = spec->get_object().if_contains("strict");
        strict != nullptr && !strict->is_bool() && !strict->is_null()) {
      return ApiError::wrong_type("response_format.json_schema.strict", "a boolean", *strict);
    }
    // Enforced whether or not "strict" is set: an output that may not validate is no use.
    out = ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, json::serialize(*schema)};
    return std::nullopt;
  }
  if (kind == "regex" || kind == "grammar") {
    const json::value* text = object->if_contains(kind);
    const std::string param = "response_format." + std::string(kind);
    if (text == nullptr || !text->is_string() || text->get_string().empty()) {
      return ApiError::wrong_type(param, "a non-empty string", text ? *text : json::value(nullptr));
    }
    out = ConstraintSpec{kind == "regex" ? ConstraintSpec::Kind::kRegex
                                         : ConstraintSpec::Kind::kGrammar,
                         std::string(text->get_string())};
    return std::nullopt;
  }
  return ApiError::invalid_request(
      fmt::format("response_format type '{}' is not supported (text, json_object, json_schema, "
                  "regex, grammar)",
                  std::string(kind)),
      "response_format", "unsupported_value");
}

std::optional<ApiError> parse_sampling(FieldReader& fields, Endpoint endpoint,
                                       SamplingParams& out) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (auto x = fields.number("temperature", 0.0, 2.0)) out.temperature = static_cast<float>(*x);
  // vLLM spells "off" as -1, llama.cpp as 0.
  if (auto x = fields.integer("top_k", -1, kIntMax)) {
    out.top_k = static_cast<int32_t>(std::max<int64_t>(*x, 0));
  }
  if (auto x = fields.number("top_p", 0.0, 1.0)) {
    if (*x == 0.0) {
      out.top_k = 1;  // OpenAI allows 0: only the most likely token survives
    } else {
      out.top_p = static_cast<float>(*x);
    }
  }
  if (auto x = fields.number("min_p", 0.0, 1.0)) out.min_p = static_cast<float>(*x);
  if (auto x = fields.number("presence_penalty", -2.0, 2.0))
    out.presence_penalty = static_cast<float>(*x);
  if (auto x = fields.number("frequency_penalty", -2.0, 2.0))
    out.frequency_penalty = static_cast<float>(*x);
  if (auto x = fields.number("repetition_penalty", 1e-6, 1e6))
    out.repetition_penalty = static_cast<float>(*x);
  if (const json::value* seed = fields.find("seed")) {
    if (seed->is_uint64()) {
      out.seed = seed->get_uint64();
    } else if (std::optional<int64_t> value = FieldReader::as_integer(*seed)) {
      out.seed = static_cast<uint64_t>(*value);
    } else {
      return ApiError::wrong_type("seed", "an integer", *seed);
    }
  }
  if (auto x = fields.boolean("ignore_eos")) out.ignore_eos = *x;
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, kIntMax);
  std::optional<int64_t> max_completion_tokens =
      fields.integer("max_completion_tokens", 1, kIntMax);
  if (max_tokens || max_completion_tokens) {
    out.max_tokens = static_cast<int32_t>(
        std::min(max_tokens.value_or(kIntMax), max_completion_tokens.value_or(kIntMax)));
  }
  if (endpoint == Endpoint::kChatCompletions) {
    if (auto x = fields.boolean("logprobs")) out.logprobs = *x;
    if (auto x = fields.integer("top_logprobs", 0, SamplingParams::kMaxTopLogprobs)) {
      out.top_logprobs = static_cast<int32_t>(*x);
      if (*x > 0 && !out.logprobs) {
        return ApiError::invalid_request("'top_logprobs' needs 'logprobs' to be true",
                                         "top_logprobs", "invalid_value");
      }
    }
  } else if (auto x = fields.integer("logprobs", 0, 5)) {
    out.logprobs = true;
    out.top_logprobs = static_cast<int32_t>(*x);
  }
  if (auto error = parse_stop(fields, out.stop)) return error;
  if (auto error = parse_logit_bias(fields, out.logit_bias)) return error;
  return fields.error;
}

}  // namespace

std::optional<ContextOverflow> parse_context_overflow(std::string_view name) {
  if (name == "error") return ContextOverflow::kError;
  if (name == "truncate") return ContextOverflow::kTruncate;
  if (name == "sink") return ContextOverflow::kSink;
  return std::nullopt;
}

std::optional<ApiError> parse_json_body(std::string_view body, json::value& out) {
  boost::system::error_code error;
  json::parse_options options;
  options.max_depth = 64;
  out = json::parse(body, error, {}, options);
  if (error) {
    return ApiError::invalid_request(
        fmt::format("The request body is not valid JSON: {}", error.message()), std::nullopt,
        "invalid_json");
  }
  if (!out.is_object()) {
    return ApiError::invalid_request(
        fmt::format("The request body must be a JSON object, got {}", json_type_name(out)),
        std::nullopt, "invalid_json");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_openai_request(Endpoint endpoint, const json::value& body,
                                             OpenAiRequest& out) {
  out = OpenAiRequest();
  out.endpoint = endpoint;
  const json::object* object = body.if_object();
  if (object == nullptr) {
    return ApiError::invalid_request("The request body must be a JSON object", std::nullopt,
                                     "invalid_json");
  }
  FieldReader fields(*object);
  std::optional<std::string> model = fields.string("model");
  if (fields.error) return fields.error;
  if (!model) {
    return ApiError::invalid_request("'model' is required", "model", "missing_required_parameter");
  }
  out.model = std::move(*model);
  if (endpoint == Endpoint::kChatCompletions) {
    if (auto error = parse_messages(*object, out.messages)) return error;
  } else if (auto error = parse_prompt(*object, out)) {
    return error;
  }
  if (auto error = refuse_unsupported(fields, endpoint)) return error;
  if (auto error = parse_sampling(fields, endpoint, out.sampling)) return error;
  if (auto error = parse_response_format(fields, out.constraint)) return error;
  if (auto error = parse_tools(fields, endpoint, out.tools)) return error;
  if (std::optional<int64_t> n = fields.integer("n", 1, OpenAiRequest::kMaxChoices)) {
    out.n = static_cast<int>(*n);
  }
  if (fields.error) return fields.error;
  if (auto x = fields.boolean("stream")) out.stream = *x;
  if (const json::value* options = fields.find("stream_options")) {
    if (!options->is_object()) return ApiError::wrong_type("stream_options", "an object", *options);
    FieldReader stream_fields(options->get_object());
    if (auto x = stream_fields.boolean("include_usage")) out.include_usage = *x;
    if (stream_fields.error) {
      ApiError error = *stream_fields.error;
      error.param = "stream_options.include_usage";
      return error;
    }
  }
  if (auto x = fields.string("cache_salt")) out.cache_salt = std::move(*x);
  if (auto x = fields.boolean("speculative")) out.speculative = *x;
  if (auto x = fields.string("context_overflow")) {
    out.context_overflow = parse_context_overflow(*x);
    if (!out.context_overflow) {
      return ApiError::invalid_request(
          fmt::format("'context_overflow' must be \"error\", \"truncate\" or \"sink\", not "
                      "\"{}\"",
                      *x),
          "context_overflow", "invalid_value");
    }
  }
  if (auto error = parse_priority(fields, out.priority)) return error;
  return fields.error;
}

}  // namespace tachyon::server
