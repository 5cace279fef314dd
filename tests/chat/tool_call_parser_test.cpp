// Recorded outputs in every tool-call format: parsed whole, then fed split at every byte
// boundary (and byte by byte), the merged events must be the same.
#include "chat/tool_call_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tachyon {
namespace {

struct Call {
  std::string name, arguments, id;
  bool operator==(const Call&) const = default;
};
struct Parsed {
  std::string text;
  std::vector<Call> calls;
  bool incomplete = false;
  bool operator==(const Parsed&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Parsed& parsed) {
  os << "text=" << testing::PrintToString(parsed.text) << " calls=[";
  for (const Call& call : parsed.calls) {
    os << "{" << call.name << ", " << testing::PrintToString(call.arguments) << ", " << call.id
       << "}";
  }
  return os << "] incomplete=" << parsed.incomplete;
}

// Merges events; checks that each call's start comes before its arguments, indexes in order.
Parsed merge(const std::vector<ToolCallEvent>& events, bool incomplete) {
  Parsed parsed;
  parsed.incomplete = incomplete;
  for (const ToolCallEvent& event : events) {
    switch (event.kind) {
      case ToolCallEvent::Kind::kText:
        parsed.text += event.text;
        break;
      case ToolCallEvent::Kind::kCallStart:
        EXPECT_EQ(event.index, static_cast<int>(parsed.calls.size()));
        parsed.calls.push_back({event.name, "", event.id});
        break;
      case ToolCallEvent::Kind::kArguments:
        EXPECT_EQ(event.index + 1, static_cast<int>(parsed.calls.size()));
        if (!parsed.calls.empty()) parsed.calls.back().arguments += event.text;
        break;
    }
  }
  return parsed;
}

Parsed parse_split(ToolCallFormat format, const std::string& output,
                   const std::vector<size_t>& cuts) {
  ToolCallParser parser(format);
  std::vector<ToolCallEvent> events;
  size_t from = 0;
  for (size_t cut : cuts) {
    parser.push(std::string_view(output).substr(from, cut - from), events);
    from = cut;
  }
  parser.push(std::string_view(output).substr(from), events);
  parser.finish(events);
  return merge(events, parser.incomplete());
}

void expect_parses(ToolCallFormat format, const std::string& output, const Parsed& expected) {
  SCOPED_TRACE(std::string(tool_call_format_name(format)) + ": " + output);
  EXPECT_EQ(parse_split(format, output, {}), expected);
  for (size_t cut = 1; cut < output.size(); ++cut) {
    ASSERT_EQ(parse_split(format, output, {cut}), expected) << "split at " << cut;
  }
  std::vector<size_t> every;
  for (size_t cut = 1; cut < output.size(); ++cut) every.push_back(cut);
  EXPECT_EQ(parse_split(format, output, every), expected) << "byte by byte";
}

const char* kWeatherArgs = R"({"city": "Paris", "days": [1, 2], "unit": "c\"elsius\"}"})";

TEST(ToolCallParserTest, Hermes) {
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kGeneric}) {
    expect_parses(format,
                  std::string("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                              "\"arguments\": ") +
                      kWeatherArgs + "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                                     "\"arguments\": {}}\n</tool_call>",
                  {"Let me check.\n",
                   {{"get_weather", kWeatherArgs, ""}, {"get_time", "{}", ""}},
                   false});
    // Arguments before the name, and as a JSON string; no arguments at all.
    expect_parses(format,
                  "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>"
                  "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}</tool_call>"
                  "<tool_call>{\"name\": \"h\"}</tool_call> done",
                  {"done", {{"f", R"({"a": 1})", ""}, {"g", R"({"b": 2})", ""}, {"h", "{}", ""}},
                   false});
    // Text that only looks like the marker's start, and no calls.
    expect_parses(format, "a <tool and <tool_cal x", {"a <tool and <tool_cal x", {}, false});
    // Cut short inside the arguments.
    expect_parses(format, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ",
                  {"", {{"f", "{\"a\": [1, ", ""}}, true});
  }
}

TEST(ToolCallParserTest, Llama3Json) {
  expect_parses(ToolCallFormat::kLlama3Json,
                R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
                {"", {{"get_weather", R"({"city": "Paris"})", ""}}, false});
  expect_parses(ToolCallFormat::kLlama3Json,
                R"(<|python_tag|>{"name": "a", "parameters": {"x": true}}; {"name": "b", "parameters": {"y": null}})",
                {"", {{"a", R"({"x": true})", ""}, {"b", R"({"y": null})", ""}}, false});
  expect_parses(ToolCallFormat::kLlama3Json, "The weather is fine.",
                {"The weather is fine.", {}, false});
}

TEST(ToolCallParserTest, MistralArray) {
  expect_parses(ToolCallFormat::kMistral,
                R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, {"name": "get_time", "arguments": {"tz": 2.5}}])",
                {"", {{"get_weather", R"({"city": "Paris"})", ""}, {"get_time", R"({"tz": 2.5})", ""}},
                 false});
}

TEST(ToolCallParserTest, MistralArgs) {
  expect_parses(ToolCallFormat::kMistralArgs,
                R"(Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Pa}ris", "n": {"a": 1}}[TOOL_CALLS]get_time[ARGS]{})",
                {"Sure.", {{"get_weather", R"({"city": "Pa}ris", "n": {"a": 1}})", ""}, {"get_time", "{}", ""}},
                 false});
}

TEST(ToolCallParserTest, DeepSeekV3) {
  expect_parses(
      ToolCallFormat::kDeepSeekV3,
      "I'll look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      {"I'll look.", {{"get_weather", R"({"city": "Paris"})", ""}, {"get_time", "{}", ""}}, false});
}

TEST(ToolCallParserTest, DeepSeekV31) {
  expect_parses(ToolCallFormat::kDeepSeekV31,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
                "\"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": "
                "\"UTC\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                {"", {{"get_weather", R"({"city": "Paris"})", ""}, {"get_time", R"({"tz": "UTC"})", ""}},
                 false});
}

TEST(ToolCallParserTest, KimiK2) {
  expect_parses(
      ToolCallFormat::kKimiK2,
      "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>"
      "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
      "<|tool_calls_section_end|>",
      {"Checking.",
       {{"get_weather", R"({"city": "Beijing"})", "functions.get_weather:0"},
        {"get_time", "{}", "functions.get_time:1"}},
       false});
  expect_parses(ToolCallFormat::kKimiK2,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                "<|tool_call_argument_begin|>{\"a\":",
                {"", {{"f", "{\"a\":", "functions.f:0"}}, true});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ToolCallFormatTest, DetectedFromRealTemplates) {
  const std::string dir = std::string(TACHYON_SHARED_DIR) + "/data/chat_templates/";
  EXPECT_EQ(detect_tool_call_format(read_file(dir + "kimi-k2-instruct.llamacpp.jinja")),
            ToolCallFormat::kKimiK2);
  EXPECT_EQ(detect_tool_call_format(read_file(dir + "deepseek-v3.1.llamacpp.jinja")),
            ToolCallFormat::kDeepSeekV31);
  EXPECT_EQ(detect_tool_call_format(read_file(dir + "llama-3-instruct.jinja")),
            ToolCallFormat::kGeneric);  // Llama 3.0 has no tool calling
  EXPECT_EQ(detect_tool_call_format(read_file(dir + "mistral-instruct-v0.1-v0.2-legacy.jinja")),
            ToolCallFormat::kGeneric);
  EXPECT_EQ(detect_tool_call_format(
                "{% for tool in message.tool_calls %}<｜tool▁call▁begin｜>' + tool['type'] + "
                "'<｜tool▁sep｜>' + tool['function']['name']{% endfor %}<｜tool▁calls▁begin｜>"),
            ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>\\n' + tool_call | tojson }}"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS]{{ name }}[ARGS]{{ args }}"),
            ToolCallFormat::kMistralArgs);
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS] {{ tool_calls | tojson }}"),
            ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|>ipython<|end_header_id|><|python_tag|>"),
            ToolCallFormat::kLlama3Json);
}

}  // namespace
}  // namespace tachyon
