// How a model writes tool calls in its output, told from its chat template. Each format is a
// fact of the model family's training (its chat template renders past calls the same way):
//
//   kGeneric      tachyon's own, for templates without tool support: the tools are described
//                 in a system message (tool_call_format.cpp) and calls are written as below
//   kHermes       Hermes / Qwen2.5:  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   kLlama3Json   Llama 3.x:         [<|python_tag|>]{"name": N, "parameters": {...}}
//   kMistral      Mistral v0.3/Nemo: [TOOL_CALLS] [{"name": N, "arguments": {...}, "id": I}, ...]
//   kMistralArgs  Mistral v11+:      [TOOL_CALLS]N[ARGS]{...}  (repeated)
//   kDeepSeekV3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
//                 <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   kDeepSeekV31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
//                 <｜tool▁calls▁end｜>
//   kKimiK2       <|tool_calls_section_begin|><|tool_call_begin|>functions.N:I
//                 <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

namespace tachyon {

enum class ToolCallFormat {
  kGeneric,
  kHermes,
  kLlama3Json,
  kMistral,
  kMistralArgs,
  kDeepSeekV3,
  kDeepSeekV31,
  kKimiK2,
};

const char* tool_call_format_name(ToolCallFormat format);

// The format a chat template's model writes; kGeneric when the template does not render tools
// in a format we know.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// The format's fixed markers that a model family's vocabulary may hold as single special
// tokens ([TOOL_CALLS], <|tool_call_begin|>, ...), in the order they appear in a call.
std::vector<std::string_view> tool_call_markers(ToolCallFormat format);

// kGeneric's system message text for these tools (an array of OpenAI tool objects).
std::string generic_tool_instructions(const boost::json::array& tools, bool required);

}  // namespace tachyon
