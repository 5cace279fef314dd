#include "server/tool_calling.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace tachyon::server {
namespace json = boost::json;
namespace {

const json::object& function_of(const json::value& tool) {
  return tool.at("function").get_object();
}

json::value parameters_of(const json::value& tool) {
  const json::value* parameters = function_of(tool).if_contains("parameters");
  if (parameters == nullptr || parameters->is_null()) return json::object{{"type", "object"}};
  return *parameters;
}

// A call's arguments: JSON valid against the tool's schema (laid out on one line as
// response_format's JSON is: the constraint compiler compacts structural tags' JSON regions).
json::value arguments_element(const json::value& tool) {
  return json::object{{"type", "json_schema"}, {"json_schema", parameters_of(tool)}};
}

// An assistant turn's past calls as the generic format writes them.
std::string generic_calls_text(const json::value& tool_calls) {
  std::string text;
  if (!tool_calls.is_array()) return text;
  for (const json::value& call : tool_calls.get_array()) {
    const json::object* object = call.if_object();
    const json::value* function = object ? object->if_contains("function") : nullptr;
    if (function == nullptr || !function->is_object()) continue;
    const json::value* name = function->get_object().if_contains("name");
    const json::value* arguments = function->get_object().if_contains("arguments");
    json::value parsed_arguments = json::object();
    if (arguments != nullptr && arguments->is_string()) {
      boost::system::error_code error;
      parsed_arguments = json::parse(arguments->get_string(), error);
      if (error) parsed_arguments = *arguments;  // not JSON: kept as the string it was
    } else if (arguments != nullptr) {
      parsed_arguments = *arguments;
    }
    text += "<tool_call>\n";
    text += json::serialize(json::object{{"name", name ? *name : json::value("")},
                                         {"arguments", parsed_arguments}});
    text += "\n</tool_call>\n";
  }
  return text;
}

}  // namespace

void prepare_tool_conversation(ToolCallFormat format, const ToolRequest* tools,
                               json::array& messages, json::value& template_tools) {
  template_tools = nullptr;
  if (format != ToolCallFormat::kGeneric) {
    if (tools != nullptr) template_tools = tools->tools;
    return;
  }
  for (json::value& value : messages) {
    json::object& message = value.as_object();
    const std::string_view role = message.at("role").as_string();
    if (role == "assistant" && message.contains("tool_calls")) {
      std::string content(message.at("content").as_string());
      if (!content.empty() && content.back() != '\n') content += '\n';
      content += generic_calls_text(message.at("tool_calls"));
      message["content"] = content;
      message.erase("tool_calls");
    } else if (role == "tool") {
      message["role"] = "user";
      message["content"] = "<tool_response>\n" + std::string(message.at("content").as_string()) +
                           "\n</tool_response>";
      message.erase("tool_call_id");
    }
  }
  if (tools == nullptr) return;
  const bool required = tools->choice == ToolRequest::Choice::kRequired ||
                        tools->choice == ToolRequest::Choice::kNamed;
  json::array offered = tools->tools;
  if (tools->choice == ToolRequest::Choice::kNamed) {
    offered.clear();
    for (const json::value& tool : tools->tools) {
      if (function_of(tool).at("name").as_string() == tools->named) offered.push_back(tool);
    }
  }
  const std::string instructions = generic_tool_instructions(offered, required);
  if (!messages.empty() && messages[0].at("role").as_string() == "system") {
    json::object& system = messages[0].as_object();
    system["content"] =
        std::string(system.at("content").as_string()) + "\n\n" + instructions;
  } else {
    messages.insert(messages.begin(), json::object{{"role", "system"}, {"content", instructions}});
  }
}

bool tool_markers_are_special(ToolCallFormat format) {
  return format != ToolCallFormat::kGeneric && format != ToolCallFormat::kHermes;
}

std::vector<TokenId> tool_marker_tokens(ToolCallFormat format, const Vocabulary& vocabulary) {
  std::vector<TokenId> ids;
  for (std::string_view marker : tool_call_markers(format)) {
    std::optional<TokenId> id = vocabulary.find(std::string(marker));
    if (id && vocabulary.types[static_cast<size_t>(*id)] == TokenType::kControl) ids.push_back(*id);
  }
  return ids;
}

namespace {

// Builds XGrammar structural-tag elements (JSON) for one format, vocabulary and tool set.
class ToolGrammarBuilder {
 public:
  ToolGrammarBuilder(ToolCallFormat format, const Vocabulary* vocabulary)
      : vocabulary_(vocabulary) {
    if (vocabulary != nullptr) marker_ids_ = tool_marker_tokens(format, *vocabulary);
  }

  // A marker: its token when the vocabulary holds it as one control token (then only that
  // token writes it), else its text.
  json::value marker(std::string_view text) const {
    if (std::optional<TokenId> id = marker_token(text)) {
      return json::object{{"type", "token"}, {"token", *id}};
    }
    return text_element(text);
  }
  std::optional<TokenId> marker_token(std::string_view text) const {
    if (vocabulary_ == nullptr) return std::nullopt;
    std::optional<TokenId> id = vocabulary_->find(std::string(text));
    if (id && std::find(marker_ids_.begin(), marker_ids_.end(), *id) != marker_ids_.end()) return id;
    return std::nullopt;
  }
  const std::vector<TokenId>& marker_ids() const { return marker_ids_; }

  static json::value text_element(std::string_view text) {
    return json::object{{"type", "const_string"}, {"value", text}};
  }
  static json::value arguments(const json::value& tool) { return arguments_element(tool); }
  static json::value sequence(json::array elements) {
    if (elements.size() == 1) return elements[0];
    return json::object{{"type", "sequence"}, {"elements", std::move(elements)}};
  }
  static json::value one_of(json::array elements) {
    if (elements.size() == 1) return elements[0];
    return json::object{{"type", "or"}, {"elements", std::move(elements)}};
  }
  // One call, or (`many`) one or more separated by `separator`.
  static json::value calls(const json::value& call, std::string_view separator, bool many) {
    if (!many) return call;
    json::value next = separator.empty() ? call : sequence({text_element(separator), call});
    return sequence({call, json::object{{"type", "star"}, {"content", next}}});
  }

 private:
  const Vocabulary* vocabulary_;
  std::vector<TokenId> marker_ids_;
};

// Where a format's calls begin and what follows that marker.
struct CallSection {
  std::string begin;   // the marker that starts the calls
  json::value rest;    // everything after it up to the end of the calls
};

// The calls section of `format` offering `tools` (one call, or one or more when `many`).
std::optional<CallSection> call_section(ToolCallFormat format, const ToolGrammarBuilder& g,
                                        const std::vector<const json::value*>& tools, bool many) {
  using B = ToolGrammarBuilder;
  json::array alternatives;     // one per tool: a whole call, as it follows its predecessor
  json::array first_rests;      // kMistralArgs: a call after its [TOOL_CALLS]
  for (const json::value* tool : tools) {
    const std::string name(function_of(*tool).at("name").as_string());
    switch (format) {
      case ToolCallFormat::kMistral:
        alternatives.push_back(B::sequence({B::text_element("{\"name\": \"" + name + "\", \"arguments\": "),
                                            B::arguments(*tool), B::text_element("}")}));
        break;
      case ToolCallFormat::kMistralArgs: {
        json::value rest = B::sequence({B::text_element(name), g.marker("[ARGS]"), B::arguments(*tool)});
        alternatives.push_back(B::sequence({g.marker("[TOOL_CALLS]"), rest}));
        first_rests.push_back(std::move(rest));
        break;
      }
      case ToolCallFormat::kDeepSeekV3:
        alternatives.push_back(B::sequence(
            {g.marker("<｜tool▁call▁begin｜>"), B::text_element("function"), g.marker("<｜tool▁sep｜>"),
             B::text_element(name + "\n```json\n"), B::arguments(*tool), B::text_element("\n```"),
             g.marker("<｜tool▁call▁end｜>")}));
        break;
      case ToolCallFormat::kDeepSeekV31:
        alternatives.push_back(B::sequence({g.marker("<｜tool▁call▁begin｜>"), B::text_element(name),
                                            g.marker("<｜tool▁sep｜>"), B::arguments(*tool),
                                            g.marker("<｜tool▁call▁end｜>")}));
        break;
      case ToolCallFormat::kKimiK2:
        // "functions.NAME:INDEX": the index numbers the calls of an answer.
        alternatives.push_back(B::sequence(
            {g.marker("<|tool_call_begin|>"), B::text_element("functions." + name + ":"),
             json::object{{"type", "regex"}, {"pattern", "[0-9]{1,3}"}},
             g.marker("<|tool_call_argument_begin|>"), B::arguments(*tool),
             g.marker("<|tool_call_end|>")}));
        break;
      default:
        return std::nullopt;
    }
  }
  const json::value call = B::one_of(std::move(alternatives));
  switch (format) {
    case ToolCallFormat::kMistral:
      return CallSection{"[TOOL_CALLS]", B::sequence({B::text_element(" ["), B::calls(call, ", ", many),
                                                      B::text_element("]")})};
    case ToolCallFormat::kMistralArgs: {
      json::value first = B::one_of(std::move(first_rests));
      if (many) first = B::sequence({first, json::object{{"type", "star"}, {"content", call}}});
      return CallSection{"[TOOL_CALLS]", std::move(first)};
    }
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
      return CallSection{"<｜tool▁calls▁begin｜>",
                         B::sequence({B::calls(call, format == ToolCallFormat::kDeepSeekV3 ? "\n" : "", many),
                                      g.marker("<｜tool▁calls▁end｜>")})};
    case ToolCallFormat::kKimiK2:
      return CallSection{"<|tool_calls_section_begin|>",
                         B::sequence({B::calls(call, "", many), g.marker("<|tool_calls_section_end|>")})};
    default:
      return std::nullopt;
  }
}

// The answer response_format asks for, as a structural-tag element.
json::value response_element(const ConstraintSpec& response) {
  switch (response.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      return json::object{{"type", "json_schema"}, {"json_schema", json::object{{"type", "object"}}}};
    case ConstraintSpec::Kind::kJsonSchema:
      return json::object{{"type", "json_schema"}, {"json_schema", json::parse(response.source)}};
    case ConstraintSpec::Kind::kRegex:
      return json::object{{"type", "regex"}, {"pattern", response.source}};
    case ConstraintSpec::Kind::kGrammar:
      return json::object{{"type", "grammar"}, {"grammar", response.source}};
    case ConstraintSpec::Kind::kStructuralTag:
      return json::parse(response.source).at("format");
  }
  return nullptr;
}

ConstraintSpec structural_tag(json::value format) {
  json::object root{{"type", "structural_tag"}, {"format", std::move(format)}};
  return ConstraintSpec{ConstraintSpec::Kind::kStructuralTag, json::serialize(root)};
}

}  // namespace

Result<std::optional<ConstraintSpec>> tool_call_constraint(ToolCallFormat format,
                                                           const ToolRequest& tools,
                                                           const Vocabulary* vocabulary,
                                                           const ConstraintSpec* response) {
  // A named function is called once, as OpenAI does.
  const bool named = tools.choice == ToolRequest::Choice::kNamed;
  const bool forced = tools.choice == ToolRequest::Choice::kRequired || named;
  const bool many = tools.parallel && !named;
  std::vector<const json::value*> offered;
  for (const json::value& tool : tools.tools) {
    if (tools.choice != ToolRequest::Choice::kNamed ||
        function_of(tool).at("name").as_string() == tools.named) {
      offered.push_back(&tool);
    }
  }
  if (format == ToolCallFormat::kGeneric || format == ToolCallFormat::kHermes) {
    // Each call is "<tool_call>" + one tool's name + arguments valid against its schema.
    json::array tags;
    for (const json::value* tool : offered) {
      const std::string name(function_of(*tool).at("name").as_string());
      tags.push_back(json::object{
          {"type", "tag"},
          {"begin", "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": "},
          {"content", arguments_element(*tool)},
          {"end", "}\n</tool_call>"}});
    }
    // auto: text, calls and text again; required / named: calls only, then the end; auto with
    // a response_format: the calls or that answer.
    if (forced || response != nullptr) {
      json::value calls = json::object{{"type", "tags_with_separator"},
                                       {"tags", std::move(tags)},
                                       {"separator", "\n"},
                                       {"at_least_one", true},
                                       {"stop_after_first", !many}};
      if (!forced) calls = ToolGrammarBuilder::one_of({std::move(calls), response_element(*response)});
      return std::optional<ConstraintSpec>(structural_tag(std::move(calls)));
    }
    return std::optional<ConstraintSpec>(structural_tag(json::object{
        {"type", "triggered_tags"},
        {"triggers", json::array{"<tool_call>"}},
        {"tags", std::move(tags)},
        {"at_least_one", false},
        {"stop_after_first", !tools.parallel}}));
  }
  const ToolGrammarBuilder builder(format, vocabulary);
  if (format == ToolCallFormat::kLlama3Json) {
    // A call is the answer's JSON: {"name": N, "parameters": {...}}.
    json::array options;
    for (const json::value* tool : offered) {
      options.push_back(json::object{
          {"type", "object"},
          {"properties", json::object{{"name", json::object{{"const", function_of(*tool).at("name")}}},
                                      {"parameters", parameters_of(*tool)}}},
          {"required", json::array{"name", "parameters"}},
          {"additionalProperties", false}});
    }
    json::value schema = options.size() == 1 ? options[0] : json::object{{"anyOf", options}};
    if (forced) {
      return std::optional<ConstraintSpec>(
          ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, json::serialize(schema)});
    }
    if (response != nullptr) {
      return std::optional<ConstraintSpec>(structural_tag(ToolGrammarBuilder::one_of(
          {json::object{{"type", "json_schema"}, {"json_schema", schema}},
           response_element(*response)})));
    }
    // auto: a call after <|python_tag|> is constrained; a bare JSON answer cannot be told from
    // text before it is written, so it is only parsed.
    std::optional<TokenId> tag = builder.marker_token("<|python_tag|>");
    if (!tag) return std::optional<ConstraintSpec>();
    return std::optional<ConstraintSpec>(structural_tag(json::object{
        {"type", "token_dispatch"},
        {"rules", json::array{json::array{*tag, json::object{{"type", "json_schema"},
                                                             {"json_schema", schema}}}}},
        {"loop", false}}));
  }
  std::optional<CallSection> section = call_section(format, builder, offered, many);
  if (!section) {
    return unsupported(fmt::format("tool calls are not enforced for the {} format",
                                   tool_call_format_name(format)));
  }
  // required / named: the answer is the calls; auto: text until the calls begin, then calls;
  // auto with a response_format: the calls or that answer.
  if (forced || response != nullptr) {
    json::value calls =
        ToolGrammarBuilder::sequence({builder.marker(section->begin), std::move(section->rest)});
    if (!forced) calls = ToolGrammarBuilder::one_of({std::move(calls), response_element(*response)});
    return std::optional<ConstraintSpec>(structural_tag(std::move(calls)));
  }
  if (std::optional<TokenId> begin = builder.marker_token(section->begin)) {
    // Other markers are never written in the text before the calls.
    json::array excluded;
    for (TokenId id : builder.marker_ids()) {
      if (id != *begin) excluded.push_back(id);
    }
    return std::optional<ConstraintSpec>(structural_tag(json::object{
        {"type", "token_dispatch"},
        {"rules", json::array{json::array{*begin, std::move(section->rest)}}},
        {"loop", false},
        {"exclude_tokens", std::move(excluded)}}));
  }
  return std::optional<ConstraintSpec>(structural_tag(json::object{
      {"type", "dispatch"},
      {"rules", json::array{json::array{section->begin, std::move(section->rest)}}},
      {"loop", false}}));
}

}  // namespace tachyon::server
