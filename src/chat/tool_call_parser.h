// ToolCallParser: a model's output text, streamed, split into answer text and tool calls in
// one of the ToolCallFormats. Text that may be the start of a call marker is held back until it
// is known not to be; a call's name is reported as soon as it is complete and its arguments
// (JSON text) fragment by fragment as they arrive, so that OpenAI's streamed tool-call deltas
// (first the name, then argument pieces that concatenate to the whole) come out of it directly.
// Feeding the same text in any split gives the same events once merged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_format.h"

namespace tachyon {

struct ToolCallEvent {
  enum class Kind {
    kText,       // `text`: answer text
    kCallStart,  // call `index` begins: `name`, and `id` when the model wrote one (Kimi-K2)
    kArguments,  // `text`: the next fragment of call `index`'s arguments (JSON text)
  };
  Kind kind = Kind::kText;
  int index = 0;
  std::string text;
  std::string name;
  std::string id;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);

  // The next piece of output; appends the events it completes.
  void push(std::string_view text, std::vector<ToolCallEvent>& out);
  // End of output: text held back comes out; a call cut short leaves incomplete() true.
  void finish(std::vector<ToolCallEvent>& out);

  int num_calls() const { return num_calls_; }
  // A call began but did not end (max_tokens, or output not in the format).
  bool incomplete() const { return incomplete_; }

 private:
  enum class State {
    kText,        // answer text, watching for the call marker
    kSection,     // inside a call section, between calls (DeepSeek, Kimi, Mistral arrays)
    kJsonCall,    // inside {"name": ..., "arguments": ...}
    kAfterJson,   // after a JSON call: its end marker / separator
    kName,        // a delimited call's name, up to its end marker
    kRawArgs,     // a delimited call's arguments, up to its end marker
    kDone,        // after the calls: the rest is text again (Hermes) or ignored
  };

  bool step(std::vector<ToolCallEvent>& out);
  bool step_text(std::vector<ToolCallEvent>& out);
  bool step_section(std::vector<ToolCallEvent>& out);
  bool step_json_call(std::vector<ToolCallEvent>& out);
  bool step_after_json(std::vector<ToolCallEvent>& out);
  bool step_name(std::vector<ToolCallEvent>& out);
  bool step_raw_args(std::vector<ToolCallEvent>& out);

  void emit_text(std::string_view text, std::vector<ToolCallEvent>& out);
  void start_call(std::string name, std::string id, std::vector<ToolCallEvent>& out);
  void emit_arguments(std::string_view text, std::vector<ToolCallEvent>& out);
  void end_call();
  void begin_json_call();
  // Drops leading whitespace from the buffer.
  void skip_space();

  ToolCallFormat format_;
  State state_ = State::kText;
  std::string buffer_;  // text not consumed yet
  bool finishing_ = false;
  bool any_output_ = false;  // text or calls emitted (Llama 3: a call starts the output)
  int num_calls_ = 0;
  bool in_call_ = false;
  bool after_call_ = false;  // drop the whitespace that follows a call
  bool incomplete_ = false;
  std::string name_end_;  // kName ends at this marker
  std::string args_end_;  // kRawArgs ends at this marker ("" = balanced JSON)

  // kJsonCall scanner: the call object's text so far and where it stands.
  std::string call_text_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  std::string key_;           // the top-level key whose value comes next / is being read
  bool reading_key_ = false;  // inside a top-level key string
  bool in_value_ = false;
  size_t value_begin_ = 0;    // in call_text_
  std::string name_;
  bool have_name_ = false;
  std::string pending_args_;  // arguments text seen before the name
  bool args_seen_ = false;
  bool args_is_string_ = false;
  int raw_depth_ = 0;  // kRawArgs with balanced-JSON end
  bool raw_started_ = false;
};

}  // namespace tachyon
