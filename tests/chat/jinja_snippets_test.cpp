// Renders every case of snippet_cases.json (outputs recorded from Python jinja2 by
// make_snippet_cases.py) and compares bytes; cases where jinja2 raised must fail here too.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "chat/chat_template.h"

namespace tachyon {
namespace {

boost::json::value load_cases() {
  std::ifstream in(std::string(TACHYON_SOURCE_DIR) + "/tests/chat/snippet_cases.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return boost::json::parse(buffer.str());
}

TEST(JinjaSnippetsTest, MatchesJinja2) {
  const boost::json::value data = load_cases();
  const boost::json::object& context = data.at("context").as_object();
  ChatTemplateInputs inputs;
  inputs.messages = context.at("messages").as_array();
  for (const auto& [key, value] : context) {
    if (key != "messages") inputs.extra_context[key] = value;
  }
  int num_cases = 0;
  for (const auto& item : data.at("cases").as_array()) {
    const boost::json::object& c = item.as_object();
    const std::string source(c.at("template").as_string());
    SCOPED_TRACE("template: " + source);
    ++num_cases;
    Result<ChatTemplate> parsed = ChatTemplate::parse(source);
    Result<std::string> rendered =
        parsed.ok() ? parsed->render(inputs) : Result<std::string>(parsed.status());
    if (c.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << "jinja2 raised " << c.at("error").as_string()
                                  << " but tachyon rendered: " << rendered.value();
      if (!rendered.ok()) {
        EXPECT_NE(rendered.status().message().find("chat template"), std::string::npos);
      }
      continue;
    }
    const std::string expected(c.at("expected").as_string());
    ASSERT_TRUE(rendered.ok()) << rendered.status().message();
    EXPECT_EQ(rendered.value(), expected);
  }
  EXPECT_GT(num_cases, 100);
}

}  // namespace
}  // namespace tachyon
