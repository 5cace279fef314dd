#include "server/tool_calling.h"

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

Result<std::optional<ConstraintSpec>> tool_call_constraint(ToolCallFormat format,
                                                           const ToolRequest& tools) {
  // A named function is called once, as OpenAI does.
  const bool named = tools.choice == ToolRequest::Choice::kNamed;
  const bool forced = tools.choice == ToolRequest::Choice::kRequired || named;
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
          {"content", json::object{{"type", "json_schema"}, {"json_schema", parameters_of(*tool)}}},
          {"end", "}\n</tool_call>"}});
    }
    // auto: text, calls and text again; required / named: calls only, then the end.
    json::object tag =
        forced ? json::object{{"type", "tags_with_separator"},
                              {"tags", std::move(tags)},
                              {"separator", "\n"},
                              {"at_least_one", true},
                              {"stop_after_first", !tools.parallel || named}}
               : json::object{{"type", "triggered_tags"},
                              {"triggers", json::array{"<tool_call>"}},
                              {"tags", std::move(tags)},
                              {"at_least_one", false},
                              {"stop_after_first", !tools.parallel}};
    json::object root{{"type", "structural_tag"}, {"format", std::move(tag)}};
    return std::optional<ConstraintSpec>(
        ConstraintSpec{ConstraintSpec::Kind::kStructuralTag, json::serialize(root)});
  }
  if (!forced) return std::optional<ConstraintSpec>();
  if (format == ToolCallFormat::kLlama3Json) {
    // The whole answer is one call's JSON.
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
    return std::optional<ConstraintSpec>(
        ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, json::serialize(schema)});
  }
  return unsupported(fmt::format(
      "tool_choice \"required\" or a named function is not enforced yet for this model's "
      "tool-call format ({}); send tool_choice \"auto\"",
      tool_call_format_name(format)));
}

}  // namespace tachyon::server
