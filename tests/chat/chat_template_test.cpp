// ChatTemplate's public API: rendering real templates, error statuses with lines, limits.
#include "chat/chat_template.h"

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "chat/jinja_interpreter.h"

namespace tachyon {
namespace {

std::string read_shared_template(const std::string& name) {
  std::ifstream in(std::string(TACHYON_SHARED_DIR) + "/data/chat_templates/" + name,
                   std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ChatTemplateInputs conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  ChatTemplateInputs inputs;
  for (const auto& [role, content] : turns) {
    inputs.messages.push_back(boost::json::object{{"role", role}, {"content", content}});
  }
  return inputs;
}

std::string render_ok(std::string_view source, const ChatTemplateInputs& inputs) {
  Result<ChatTemplate> parsed = ChatTemplate::parse(source);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  if (!parsed.ok()) return "";
  Result<std::string> rendered = parsed->render(inputs);
  EXPECT_TRUE(rendered.ok()) << rendered.status().message();
  return rendered.ok() ? rendered.value() : "";
}

Status render_error(std::string_view source, const ChatTemplateInputs& inputs = {}) {
  Result<ChatTemplate> parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return parsed.status();
  Result<std::string> rendered = parsed->render(inputs);
  EXPECT_FALSE(rendered.ok()) << "rendered: " << rendered.value();
  return rendered.ok() ? Status() : rendered.status();
}

TEST(ChatTemplateTest, RendersLlama3) {
  ChatTemplateInputs inputs = conversation({{"system", "Be brief. "}, {"user", " Hi! "}});
  inputs.bos_token = "<|begin_of_text|>";
  inputs.add_generation_prompt = true;
  EXPECT_EQ(render_ok(read_shared_template("llama-3-instruct.jinja"), inputs),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, RendersChatMlWithDefaultSystem) {
  const std::string source =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nDefault<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
      "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  ChatTemplateInputs inputs = conversation({{"user", "Hello"}});
  EXPECT_EQ(render_ok(source, inputs),
            "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n");
  inputs.add_generation_prompt = true;
  EXPECT_EQ(render_ok(source, inputs),
            "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, KimiCrlfTemplateUsesToolsAndNormalisesNewlines) {
  const std::string source = read_shared_template("kimi-k2-instruct.llamacpp.jinja");
  ASSERT_NE(source.find("\r\n"), std::string::npos);
  ChatTemplateInputs inputs = conversation({{"user", "Hi"}});
  inputs.tools = boost::json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(render_ok(source, inputs),
            "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", \"function\": "
            "{\"name\": \"f\"}}]<|im_end|><|im_system|>system<|im_middle|>You are a helpful "
            "assistant<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>");
}

TEST(ChatTemplateTest, ContextHasHuggingFaceVariables) {
  ChatTemplateInputs inputs = conversation({{"user", "x"}});
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.extra_context["enable_thinking"] = true;
  EXPECT_EQ(render_ok("{{ bos_token }}{{ eos_token }}|{{ tools }}|{{ documents }}|"
                      "{{ add_generation_prompt }}|{{ enable_thinking }}|{{ messages|length }}",
                      inputs),
            "<s></s>|None|None|False|True|1");
}

TEST(ChatTemplateTest, SyntaxErrorNamesConstructAndLine) {
  Status status = render_error("line one\n{% if x %}\n{% for %}\n{% endif %}");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line 3"), std::string::npos) << status.message();

  status = render_error("a\nb\n{% if true %}never closed");
  EXPECT_NE(status.message().find("endif"), std::string::npos) << status.message();

  status = render_error("{% include 'other.jinja' %}");
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("unsupported tag 'include'"), std::string::npos);
}

TEST(ChatTemplateTest, RuntimeErrorsCarryMessageAndLine) {
  Status status = render_error("\n\n{{ raise_exception('roles must alternate') }}");
  EXPECT_EQ(status.message(), "chat template line 3: roles must alternate");

  status = render_error("{{ 'a' }}\n{{ x | xmlattr }}");
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_EQ(status.message(), "chat template line 2: unsupported filter 'xmlattr'");

  status = render_error("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}",
                        conversation({{"user", "x"}}));
  EXPECT_NE(status.message().find("line 2: can only concatenate str"), std::string::npos)
      << status.message();

  status = render_error("{{ undefined_thing.attribute }}");
  EXPECT_NE(status.message().find("'undefined_thing' is undefined"), std::string::npos);
}

TEST(ChatTemplateTest, RejectsInvalidUtf8Template) {
  Result<ChatTemplate> parsed = ChatTemplate::parse("ok \xff bad");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("UTF-8"), std::string::npos);
}

TEST(ChatTemplateTest, RejectsHugeIntegersInInput) {
  ChatTemplateInputs inputs;
  inputs.extra_context["big"] = boost::json::value(uint64_t{18446744073709551615ull});
  Result<ChatTemplate> parsed = ChatTemplate::parse("{{ big }}");
  ASSERT_TRUE(parsed.ok());
  Result<std::string> rendered = parsed->render(inputs);
  ASSERT_FALSE(rendered.ok());
  EXPECT_NE(rendered.status().message().find("'big'"), std::string::npos);
}

TEST(ChatTemplateTest, OutputLimit) {
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1000;
  Result<ChatTemplate> parsed =
      ChatTemplate::parse("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}");
  ASSERT_TRUE(parsed.ok());
  Result<std::string> rendered = parsed->render({}, limits);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kOutOfRange);

  parsed = ChatTemplate::parse("{{ 'x' * 1000000000000 }}");
  ASSERT_TRUE(parsed.ok());
  rendered = parsed->render({});
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kOutOfRange);
}

TEST(ChatTemplateTest, StepLimitStopsRunawayLoops) {
  Result<ChatTemplate> parsed = ChatTemplate::parse(
      "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(parsed.ok());
  jinja::RenderLimits limits;
  limits.max_steps = 100000;
  Result<std::string> rendered = parsed->render({}, limits);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(rendered.status().message().find("steps"), std::string::npos);
}

TEST(ChatTemplateTest, RecursionAndNestingAreBounded) {
  Status status = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("macro"), std::string::npos);

  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  status = render_error(deep);
  EXPECT_NE(status.message().find("nested too deeply"), std::string::npos) << status.message();

  std::string deep_blocks;
  for (int i = 0; i < 3000; ++i) deep_blocks += "{% if true %}";
  status = render_error(deep_blocks);
  EXPECT_FALSE(status.ok());
}

TEST(ChatTemplateTest, HostileValueShapesFailCleanly) {
  // A namespace that contains itself: printing must not recurse forever.
  EXPECT_FALSE(render_error("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}").ok());
  // Ever deeper lists.
  EXPECT_FALSE(render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
                            "{% set ns.x = [ns.x] %}{% endfor %}")
                   .ok());
  // Long else chains and subscript tuples with slices.
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " if x else 1";
  chain += " }}";
  EXPECT_FALSE(render_error(chain).ok());
  EXPECT_FALSE(render_error("{{ x[1:2, 3] }}").ok());
  std::string sum = "{{ 1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  sum += " }}";
  EXPECT_FALSE(render_error(sum).ok());
}

TEST(ChatTemplateTest, LongNamespaceChainsAreFreed) {
  // A linked list of 50k namespaces built forward; freeing it must not recurse per link.
  Result<ChatTemplate> parsed = ChatTemplate::parse(
      "{% set head = namespace(next=none) %}{% set ns = namespace(cur=head) %}"
      "{% for i in range(50000) %}{% set c = ns.cur %}{% set c.next = namespace(next=none) %}"
      "{% set ns.cur = c.next %}{% endfor %}done");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  Result<std::string> rendered = parsed->render({});
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_EQ(rendered.value(), "done");
}

TEST(ChatTemplateTest, ConcurrentRendersShareOneTemplate) {
  Result<ChatTemplate> parsed = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.role }}:{{ m.content }};{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(parsed.ok());
  const ChatTemplate& chat_template = parsed.value();
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ChatTemplateInputs inputs = conversation({{"user", "a"}, {"assistant", "b"}});
      for (int i = 0; i < 200; ++i) {
        Result<std::string> rendered = chat_template.render(inputs);
        if (rendered.ok()) outputs[static_cast<size_t>(t)] = rendered.value();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& out : outputs) EXPECT_EQ(out, "user:a;assistant:b;2");
}

}  // namespace
}  // namespace tachyon
