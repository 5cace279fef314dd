#include "chat/tool_call_format.h"

namespace tachyon {

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kGeneric: return "generic";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kMistralArgs: return "mistral_args";
    case ToolCallFormat::kDeepSeekV3: return "deepseek_v3";
    case ToolCallFormat::kDeepSeekV31: return "deepseek_v3.1";
    case ToolCallFormat::kKimiK2: return "kimi_k2";
  }
  return "unknown";
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  const auto has = [&](std::string_view needle) {
    return source.find(needle) != std::string_view::npos;
  };
  if (has("<|tool_calls_section_begin|>") || has("tool_declare")) return ToolCallFormat::kKimiK2;
  if (has("<｜tool▁calls▁begin｜>")) {
    // V3 writes the call's type before the separator and the name after it.
    return has("tool['type'] + '<｜tool▁sep｜>'") || has("tool.type + '<｜tool▁sep｜>'")
               ? ToolCallFormat::kDeepSeekV3
               : ToolCallFormat::kDeepSeekV31;
  }
  if (has("[TOOL_CALLS]")) {
    return has("[ARGS]") ? ToolCallFormat::kMistralArgs : ToolCallFormat::kMistral;
  }
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("tools") &&
                                has("\"parameters\""))) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kGeneric;
}

std::vector<std::string_view> tool_call_markers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kHermes:
      return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLlama3Json:
      return {"<|python_tag|>"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]"};
    case ToolCallFormat::kMistralArgs:
      return {"[TOOL_CALLS]", "[ARGS]"};
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
              "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
    case ToolCallFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>"};
  }
  return {};
}

std::string generic_tool_instructions(const boost::json::array& tools, bool required) {
  std::string text =
      "You can call functions (tools) to help answer. To call one, write exactly\n"
      "<tool_call>\n{\"name\": \"FUNCTION NAME\", \"arguments\": {ARGUMENTS AS A JSON OBJECT}}\n"
      "</tool_call>\n"
      "with one such block per call. The results come back in a later message. ";
  text += required ? "You must call at least one function now.\n"
                   : "Answer in plain text when no function is needed.\n";
  text += "The functions:\n";
  for (const boost::json::value& tool : tools) {
    text += boost::json::serialize(tool);
    text += "\n";
  }
  return text;
}

}  // namespace tachyon
