#include "chat/tool_call_parser.h"

#include <algorithm>

#include <boost/json.hpp>

namespace tachyon {
namespace {

struct Markers {
  std::string_view section_begin;  // where calls start in the text
  std::string_view call_begin;     // a call inside a section (DeepSeek, Kimi)
  std::string_view name_end;       // a delimited call's name ends here
  std::string_view args_end;       // its arguments end here ("" = when the JSON value closes)
  std::string_view section_end;
  std::string_view json_end;       // after a JSON call (Hermes)
  std::string_view args_key;       // a JSON call's arguments key
};

Markers markers_of(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kHermes:
      return {"<tool_call>", "", "", "", "", "</tool_call>", "arguments"};
    case ToolCallFormat::kLlama3Json:
      return {"<|python_tag|>", "", "", "", "", "", "parameters"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]", "", "", "", "", "", "arguments"};
    case ToolCallFormat::kMistralArgs:
      return {"[TOOL_CALLS]", "", "[ARGS]", "", "", "", ""};
    case ToolCallFormat::kDeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "\n```json\n",
              "\n```<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "", ""};
    case ToolCallFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
              "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "", ""};
    case ToolCallFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
              "", ""};
  }
  return {};
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Length of the longest suffix of `text` that is a proper prefix of `marker`: bytes that may
// still turn out to be the marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length) {
    if (marker.substr(0, length) == text.substr(text.size() - length)) return length;
  }
  return 0;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format) {}

void ToolCallParser::push(std::string_view text, std::vector<ToolCallEvent>& out) {
  buffer_.append(text);
  while (step(out)) {
  }
}

void ToolCallParser::finish(std::vector<ToolCallEvent>& out) {
  finishing_ = true;
  while (step(out)) {
  }
  if (in_call_ || state_ == State::kJsonCall || state_ == State::kName ||
      state_ == State::kRawArgs) {
    incomplete_ = true;
  }
  if (state_ == State::kText || state_ == State::kDone) emit_text(buffer_, out);
  buffer_.clear();
}

void ToolCallParser::skip_space() {
  size_t skip = 0;
  while (skip < buffer_.size() && is_space(buffer_[skip])) ++skip;
  buffer_.erase(0, skip);
}

void ToolCallParser::emit_text(std::string_view text, std::vector<ToolCallEvent>& out) {
  if (text.empty()) return;
  any_output_ = true;
  if (!out.empty() && out.back().kind == ToolCallEvent::Kind::kText) {
    out.back().text.append(text);
    return;
  }
  out.push_back({ToolCallEvent::Kind::kText, 0, std::string(text), "", ""});
}

void ToolCallParser::start_call(std::string name, std::string id, std::vector<ToolCallEvent>& out) {
  any_output_ = true;
  in_call_ = true;
  out.push_back({ToolCallEvent::Kind::kCallStart, num_calls_, "", std::move(name), std::move(id)});
}

void ToolCallParser::emit_arguments(std::string_view text, std::vector<ToolCallEvent>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == ToolCallEvent::Kind::kArguments &&
      out.back().index == num_calls_) {
    out.back().text.append(text);
    return;
  }
  out.push_back({ToolCallEvent::Kind::kArguments, num_calls_, std::string(text), "", ""});
}

void ToolCallParser::end_call() {
  in_call_ = false;
  after_call_ = true;
  ++num_calls_;
}

void ToolCallParser::begin_json_call() {
  state_ = State::kJsonCall;
  call_text_.clear();
  depth_ = 0;
  in_string_ = escaped_ = reading_key_ = in_value_ = false;
  key_.clear();
  name_.clear();
  have_name_ = false;
  pending_args_.clear();
  args_seen_ = args_is_string_ = false;
}

bool ToolCallParser::step(std::vector<ToolCallEvent>& out) {
  switch (state_) {
    case State::kText: return step_text(out);
    case State::kSection: return step_section(out);
    case State::kJsonCall: return step_json_call(out);
    case State::kAfterJson: return step_after_json(out);
    case State::kName: return step_name(out);
    case State::kRawArgs: return step_raw_args(out);
    case State::kDone:
      emit_text(buffer_, out);
      buffer_.clear();
      return false;
  }
  return false;
}

bool ToolCallParser::step_text(std::vector<ToolCallEvent>& out) {
  if (after_call_) {
    // Whitespace between calls (and after the last one) is layout, not answer text.
    skip_space();
    if (buffer_.empty()) return false;
    after_call_ = false;
  }
  if (buffer_.empty()) return false;
  // Llama 3 answers with the call's JSON alone, <|python_tag|> optional.
  if (format_ == ToolCallFormat::kLlama3Json && !any_output_) {
    const size_t first = buffer_.find_first_not_of(" \n\t\r");
    if (first == std::string::npos) {
      if (!finishing_) return false;
    } else if (buffer_[first] == '{') {
      buffer_.erase(0, first);
      begin_json_call();
      return true;
    }
  }
  const Markers markers = markers_of(format_);
  const size_t found = buffer_.find(markers.section_begin);
  if (found == std::string::npos) {
    const size_t keep = finishing_ ? 0 : partial_marker(buffer_, markers.section_begin);
    if (buffer_.size() == keep) return false;
    emit_text(std::string_view(buffer_).substr(0, buffer_.size() - keep), out);
    buffer_.erase(0, buffer_.size() - keep);
    return false;
  }
  emit_text(std::string_view(buffer_).substr(0, found), out);
  buffer_.erase(0, found + markers.section_begin.size());
  switch (format_) {
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kLlama3Json:
      begin_json_call();
      break;
    case ToolCallFormat::kMistralArgs:
      state_ = State::kName;
      break;
    default:
      state_ = State::kSection;
  }
  return true;
}

bool ToolCallParser::step_section(std::vector<ToolCallEvent>& out) {
  skip_space();
  if (buffer_.empty()) return false;
  const Markers markers = markers_of(format_);
  if (format_ == ToolCallFormat::kMistral) {
    if (buffer_[0] == '[') {
      buffer_.erase(0, 1);
      begin_json_call();
    } else {
      state_ = State::kText;  // not the format after all
    }
    return true;
  }
  if (starts_with(buffer_, markers.call_begin)) {
    buffer_.erase(0, markers.call_begin.size());
    state_ = State::kName;
    return true;
  }
  if (starts_with(buffer_, markers.section_end)) {
    buffer_.erase(0, markers.section_end.size());
    state_ = State::kText;
    return true;
  }
  if (!finishing_ && (starts_with(markers.call_begin, buffer_) ||
                      starts_with(markers.section_end, buffer_))) {
    return false;  // a marker still arriving
  }
  state_ = State::kText;
  (void)out;
  return true;
}

bool ToolCallParser::step_name(std::vector<ToolCallEvent>& out) {
  const Markers markers = markers_of(format_);
  const size_t found = buffer_.find(markers.name_end);
  if (found == std::string::npos) return false;
  std::string_view header = trim(std::string_view(buffer_).substr(0, found));
  std::string name, id;
  if (format_ == ToolCallFormat::kKimiK2) {
    // "functions.NAME:INDEX": the whole header is the call's id.
    id = std::string(header);
    std::string_view bare = header;
    if (starts_with(bare, "functions.")) bare.remove_prefix(10);
    if (const size_t colon = bare.rfind(':'); colon != std::string_view::npos) {
      bare = bare.substr(0, colon);
    }
    name = std::string(bare);
  } else if (format_ == ToolCallFormat::kDeepSeekV3) {
    // "function<｜tool▁sep｜>NAME"
    constexpr std::string_view kSeparator = "<｜tool▁sep｜>";
    if (const size_t separator = header.find(kSeparator); separator != std::string_view::npos) {
      header.remove_prefix(separator + kSeparator.size());
    }
    name = std::string(trim(header));
  } else {
    name = std::string(header);
  }
  buffer_.erase(0, found + markers.name_end.size());
  start_call(std::move(name), std::move(id), out);
  state_ = State::kRawArgs;
  raw_depth_ = 0;
  raw_started_ = false;
  in_string_ = escaped_ = false;
  return true;
}

bool ToolCallParser::step_raw_args(std::vector<ToolCallEvent>& out) {
  const Markers markers = markers_of(format_);
  if (markers.args_end.empty()) {
    // Mistral: the arguments end where their JSON value closes.
    size_t i = 0;
    if (!raw_started_) {
      skip_space();
      if (buffer_.empty()) return false;
    }
    for (; i < buffer_.size(); ++i) {
      const char c = buffer_[i];
      raw_started_ = true;
      if (in_string_) {
        if (escaped_) escaped_ = false;
        else if (c == '\\') escaped_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (c == '"') in_string_ = true;
      else if (c == '{' || c == '[') ++raw_depth_;
      else if ((c == '}' || c == ']') && --raw_depth_ == 0) {
        emit_arguments(std::string_view(buffer_).substr(0, i + 1), out);
        buffer_.erase(0, i + 1);
        end_call();
        state_ = State::kText;
        return true;
      }
    }
    emit_arguments(buffer_, out);
    buffer_.clear();
    return false;
  }
  const size_t found = buffer_.find(markers.args_end);
  if (found == std::string::npos) {
    const size_t keep = partial_marker(buffer_, markers.args_end);
    if (buffer_.size() == keep) return false;
    emit_arguments(std::string_view(buffer_).substr(0, buffer_.size() - keep), out);
    buffer_.erase(0, buffer_.size() - keep);
    return false;
  }
  emit_arguments(std::string_view(buffer_).substr(0, found), out);
  buffer_.erase(0, found + markers.args_end.size());
  end_call();
  state_ = State::kSection;
  return true;
}

bool ToolCallParser::step_json_call(std::vector<ToolCallEvent>& out) {
  const Markers markers = markers_of(format_);
  if (call_text_.empty()) {
    skip_space();
    if (buffer_.empty()) return false;
    if (buffer_[0] != '{') {
      state_ = State::kText;  // not a call after all: the rest is text
      return true;
    }
  }
  const auto is_args = [&] { return key_ == markers.args_key || key_ == "arguments"; };
  std::string arguments;  // this push's argument characters, emitted together
  const auto flush_arguments = [&] {
    if (arguments.empty()) return;
    if (have_name_) emit_arguments(arguments, out);
    else pending_args_ += arguments;
    arguments.clear();
  };
  const auto finish_value = [&](size_t end) {
    const std::string text = call_text_.substr(value_begin_, end - value_begin_);
    in_value_ = false;
    if (key_ == "name") {
      boost::system::error_code error;
      const boost::json::value name = boost::json::parse(text, error);
      if (!error && name.is_string() && !have_name_) {
        have_name_ = true;
        name_ = std::string(name.get_string());
        start_call(name_, "", out);
        if (!pending_args_.empty()) emit_arguments(pending_args_, out);
        pending_args_.clear();
      }
    } else if (is_args()) {
      args_seen_ = true;
      if (args_is_string_) {
        // Arguments written as a JSON string holding the JSON text.
        boost::system::error_code error;
        const boost::json::value decoded = boost::json::parse(text, error);
        if (!error && decoded.is_string()) arguments += decoded.get_string();
      }
    }
  };
  size_t consumed = 0;
  bool call_done = false;
  for (; consumed < buffer_.size() && !call_done; ++consumed) {
    const char c = buffer_[consumed];
    call_text_ += c;
    const size_t position = call_text_.size() - 1;
    const bool value_started = in_value_ && value_begin_ != std::string::npos;
    const bool streaming = value_started && is_args() && !args_is_string_;
    if (in_string_) {
      if (streaming) arguments += c;
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
        if (reading_key_) {
          reading_key_ = false;
        } else if (value_started && depth_ == 1) {
          finish_value(position + 1);  // a string value at the top level
        }
      } else if (reading_key_) {
        key_ += c;
      }
      continue;
    }
    if (depth_ == 1 && in_value_ && !value_started && !is_space(c) && c != ',' && c != '}') {
      value_begin_ = position;  // the value's first character
      args_is_string_ = is_args() && c == '"';
    }
    const bool part_of_value = in_value_ && value_begin_ != std::string::npos &&
                               !(depth_ == 1 && (c == ',' || c == '}'));
    if (part_of_value && is_args() && !args_is_string_) arguments += c;
    if (c == '"') {
      in_string_ = true;
      if (depth_ == 1 && !in_value_) {
        reading_key_ = true;
        key_.clear();
      }
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (depth_ == 1 && in_value_ && value_begin_ != std::string::npos) {
        finish_value(position);  // a number, true, false or null ends with the object
      }
      --depth_;
      if (depth_ == 1 && in_value_) finish_value(position + 1);  // an object or array value
      if (depth_ == 0) call_done = true;
    } else if (c == ':' && depth_ == 1 && !in_value_) {
      in_value_ = true;
      value_begin_ = std::string::npos;
    } else if (c == ',' && depth_ == 1) {
      if (in_value_ && value_begin_ != std::string::npos) finish_value(position);
      in_value_ = false;
    }
  }
  buffer_.erase(0, consumed);
  flush_arguments();
  if (!call_done) return false;
  if (!have_name_) {
    // Not a call: the object was text.
    emit_text(call_text_, out);
    state_ = State::kAfterJson;
    return true;
  }
  if (!args_seen_) emit_arguments("{}", out);
  end_call();
  state_ = State::kAfterJson;
  return true;
}

bool ToolCallParser::step_after_json(std::vector<ToolCallEvent>& out) {
  (void)out;
  const Markers markers = markers_of(format_);
  if (format_ == ToolCallFormat::kGeneric || format_ == ToolCallFormat::kHermes) {
    skip_space();
    if (buffer_.empty()) return false;
    if (starts_with(buffer_, markers.json_end)) {
      buffer_.erase(0, markers.json_end.size());
    } else if (!finishing_ && starts_with(markers.json_end, buffer_)) {
      return false;
    }
    state_ = State::kText;
    return true;
  }
  skip_space();
  if (buffer_.empty()) return false;
  if (format_ == ToolCallFormat::kLlama3Json) {
    if (buffer_[0] == ';') {  // several calls, ';'-separated
      buffer_.erase(0, 1);
      begin_json_call();
    } else {
      state_ = State::kDone;
    }
    return true;
  }
  if (format_ == ToolCallFormat::kMistral) {
    if (buffer_[0] == ',') {
      buffer_.erase(0, 1);
      begin_json_call();
      return true;
    }
    if (buffer_[0] == ']') buffer_.erase(0, 1);
    state_ = State::kText;
    return true;
  }
  state_ = State::kText;
  return true;
}

}  // namespace tachyon
