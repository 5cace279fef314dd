// Untrusted templates must never crash or hang: mutated real templates and random byte soup
// either render or fail with a Status, within the limits.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "chat/jinja_interpreter.h"

namespace tachyon {
namespace {

std::vector<std::string> shared_templates() {
  std::vector<std::string> sources;
  const std::filesystem::path dir =
      std::filesystem::path(TACHYON_SHARED_DIR) / "data" / "chat_templates";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    sources.push_back(buffer.str());
  }
  return sources;
}

ChatTemplateInputs sample_inputs() {
  ChatTemplateInputs inputs;
  inputs.messages = boost::json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "content": "ok"}])")
                        .as_array();
  inputs.tools = boost::json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  inputs.add_generation_prompt = true;
  return inputs;
}

TEST(JinjaRobustnessTest, MutatedTemplatesNeverCrash) {
  std::vector<std::string> sources = shared_templates();
  sources.push_back(
      "{% macro m(x) %}{{ m(x) }}{% endmacro %}{% for i in range(99999) %}{{ i ~ m(i) }}"
      "{% endfor %}{{ 'a' * 99999999 }}{{ [1,2][::-1] }}{% set ns = namespace(a=1) %}");
  ASSERT_FALSE(sources.empty());
  static constexpr std::string_view kFragments[] = {"{%",
                                                    "%}",
                                                    "{{",
                                                    "}}",
                                                    "{#",
                                                    "#}",
                                                    "-",
                                                    "+",
                                                    "(",
                                                    ")",
                                                    "[",
                                                    "]",
                                                    "{",
                                                    "}",
                                                    "'",
                                                    "\"",
                                                    "|",
                                                    ".",
                                                    ",",
                                                    ":",
                                                    "~",
                                                    "*",
                                                    "**",
                                                    "//",
                                                    "%",
                                                    " if ",
                                                    " else ",
                                                    " for ",
                                                    " in ",
                                                    " is ",
                                                    " not ",
                                                    "endif",
                                                    "endfor",
                                                    "loop",
                                                    "ns",
                                                    "messages",
                                                    "range(9)",
                                                    "\n",
                                                    "\\",
                                                    "\xc3\xa9",
                                                    "{% raw %}",
                                                    "{% endraw %}",
                                                    "{% macro x() %}",
                                                    "{% endmacro %}",
                                                    "x()",
                                                    "caller()"};
  std::mt19937 rng(1234);
  const ChatTemplateInputs inputs = sample_inputs();
  jinja::RenderLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  const auto start = std::chrono::steady_clock::now();
  int rendered = 0;
  int failed = 0;
  for (int iteration = 0; iteration < 10000; ++iteration) {
    std::string source = sources[rng() % sources.size()];
    const int num_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < num_edits && !source.empty(); ++e) {
      const size_t at = rng() % source.size();
      switch (rng() % 3) {
        case 0:
          source.erase(at, 1 + rng() % 8);
          break;
        case 1:
          source.insert(at, kFragments[rng() % std::size(kFragments)]);
          break;
        default:
          source[at] = static_cast<char>(rng() % 256);
      }
    }
    Result<ChatTemplate> parsed = ChatTemplate::parse(source);
    if (!parsed.ok()) {
      ++failed;
      EXPECT_FALSE(parsed.status().message().empty());
      continue;
    }
    Result<std::string> out = parsed->render(inputs, limits);
    out.ok() ? ++rendered : ++failed;
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(failed, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

}  // namespace
}  // namespace tachyon
