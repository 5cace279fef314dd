// The grammars that enforce tool_choice, per tool-call format, on a vocabulary that holds the
// formats' markers as control tokens (as the real Mistral, DeepSeek, Kimi-K2 and Llama 3
// vocabularies do) and spells everything else byte by byte: the canonical answer of each format
// is accepted token by token and parses back into its calls; random walks through the grammar
// (any allowed token at each step) always end in calls that parse, name an offered tool and
// carry arguments valid against its schema; required / named choices refuse plain text; auto
// lets text come first and keeps the markers out of it; markers never appear inside arguments.
#include "server/tool_calling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "byte_vocabulary.h"
#include "chat/tool_call_parser.h"
#include "structured/constraint_compiler.h"

namespace tachyon::server {
namespace {

namespace json = boost::json;

constexpr TokenId kEos = 2;

std::unique_ptr<Tokenizer> marker_tokenizer() {
  Vocabulary vocabulary = byte_vocabulary();
  auto add = [&](const std::string& text, TokenType type) { add_token(vocabulary, text, type); };
  add("\u2581", TokenType::kNormal);  // SentencePiece's space
  for (ToolCallFormat format : {ToolCallFormat::kLlama3Json, ToolCallFormat::kMistralArgs,
                                ToolCallFormat::kDeepSeekV3, ToolCallFormat::kKimiK2}) {
    for (std::string_view marker : tool_call_markers(format)) {
      if (!vocabulary.token_to_id.contains(std::string(marker))) {
        add(std::string(marker), TokenType::kControl);
      }
    }
  }
  add("<|unrelated_control|>", TokenType::kControl);
  vocabulary.bos_id = 1;
  vocabulary.eos_id = kEos;
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_vocabulary(std::move(vocabulary));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return std::move(*tokenizer);
}

const char* kWeather =
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string","maxLength":6},"unit":{"enum":["c","f"]}},)"
    R"("required":["city","unit"],"additionalProperties":false}}})";
const char* kTime =
    R"({"type":"function","function":{"name":"get_time","parameters":{"type":"object",)"
    R"("properties":{"zone":{"type":"integer","minimum":-12,"maximum":14}},)"
    R"("required":["zone"],"additionalProperties":false}}})";

ToolRequest tool_request(ToolRequest::Choice choice, bool parallel = true,
                         const std::string& named = "") {
  ToolRequest request;
  request.tools = json::array{json::parse(kWeather), json::parse(kTime)};
  request.choice = choice;
  request.parallel = parallel;
  request.named = named;
  return request;
}

struct Call {
  std::string name;
  std::string arguments;
};

struct Parsed {
  std::string text;
  std::vector<Call> calls;
  bool incomplete = false;
};

Parsed parse(ToolCallFormat format, const std::string& output) {
  ToolCallParser parser(format);
  std::vector<ToolCallEvent> events;
  parser.push(output, events);
  parser.finish(events);
  Parsed parsed;
  for (const ToolCallEvent& event : events) {
    if (event.kind == ToolCallEvent::Kind::kText) parsed.text += event.text;
    if (event.kind == ToolCallEvent::Kind::kCallStart) parsed.calls.push_back({event.name, ""});
    if (event.kind == ToolCallEvent::Kind::kArguments) parsed.calls.back().arguments += event.text;
  }
  parsed.incomplete = parser.incomplete();
  return parsed;
}

size_t characters(std::string_view utf8) {
  return static_cast<size_t>(std::count_if(utf8.begin(), utf8.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// Why `call` is not a valid call of the tools above, or "".
std::string invalid_call(const Call& call) {
  boost::system::error_code error;
  json::value arguments = json::parse(call.arguments, error);
  if (error || !arguments.is_object()) return "arguments are not a JSON object: " + call.arguments;
  const json::object& object = arguments.get_object();
  if (call.name == "get_weather") {
    if (object.size() != 2 || !object.contains("city") || !object.contains("unit")) {
      return "get_weather arguments " + call.arguments;
    }
    if (!object.at("city").is_string() || characters(object.at("city").get_string()) > 6) {
      return "city " + call.arguments;
    }
    const json::value& unit = object.at("unit");
    if (!unit.is_string() || (unit.get_string() != "c" && unit.get_string() != "f")) {
      return "unit " + call.arguments;
    }
    return "";
  }
  if (call.name == "get_time") {
    if (object.size() != 1 || !object.contains("zone") || !object.at("zone").is_int64()) {
      return "get_time arguments " + call.arguments;
    }
    const int64_t zone = object.at("zone").get_int64();
    return zone >= -12 && zone <= 14 ? "" : "zone " + call.arguments;
  }
  return "unknown tool " + call.name;
}

class ToolCallingTest : public ::testing::Test {
 protected:
  void SetUp() override { tokenizer_ = marker_tokenizer(); }

  std::unique_ptr<ConstraintCompiler> compiler_for(ToolCallFormat format) {
    const std::vector<TokenId> markers = tool_marker_tokens(format, tokenizer_->vocabulary());
    const TokenId stops[] = {kEos};
    Result<std::unique_ptr<ConstraintCompiler>> compiler = ConstraintCompiler::create(
        *tokenizer_, stops, tokenizer_->vocabulary_size(), markers);
    EXPECT_TRUE(compiler.ok()) << compiler.status().message();
    return std::move(*compiler);
  }

  std::unique_ptr<TokenConstraint> start(ConstraintCompiler& compiler, ToolCallFormat format,
                                         const ToolRequest& request) {
    Result<std::optional<ConstraintSpec>> spec =
        tool_call_constraint(format, request, &tokenizer_->vocabulary());
    EXPECT_TRUE(spec.ok()) << spec.status().message();
    if (!spec.ok() || !*spec) return nullptr;
    Result<std::shared_ptr<const CompiledConstraint>> grammar =
        compiler.compile(**spec, std::chrono::seconds(30));
    EXPECT_TRUE(grammar.ok()) << grammar.status().message() << "\n" << (*spec)->source;
    if (!grammar.ok()) return nullptr;
    return compiler.start(*grammar);
  }

  std::vector<TokenId> allowed(TokenConstraint& constraint) {
    std::vector<float> logits(static_cast<size_t>(tokenizer_->vocabulary_size()), 0.0f);
    constraint.mask(logits);
    std::vector<TokenId> ids;
    for (TokenId id = 0; id < static_cast<TokenId>(logits.size()); ++id) {
      if (std::isfinite(logits[static_cast<size_t>(id)])) ids.push_back(id);
    }
    return ids;
  }

  std::string decode(const std::vector<TokenId>& ids) {
    Result<std::string> text = tokenizer_->decode(ids, /*skip_special=*/false);
    EXPECT_TRUE(text.ok());
    return text.ok() ? *text : "";
  }

  // Feeds `answer` (markers spelled as their tokens) token by token; every token must be
  // accepted and the end allowed after it.
  void expect_accepted(ToolCallFormat format, const ToolRequest& request,
                       const std::string& answer, const std::vector<std::string>& names) {
    SCOPED_TRACE(std::string(tool_call_format_name(format)) + ": " + answer);
    std::unique_ptr<ConstraintCompiler> compiler = compiler_for(format);
    std::unique_ptr<TokenConstraint> constraint = start(*compiler, format, request);
    ASSERT_NE(constraint, nullptr);
    const std::vector<TokenId> ids = tokenizer_->encode(answer);
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(constraint->accept(ids[i]))
          << "token " << i << " (" << tokenizer_->vocabulary().tokens[ids[i]] << ") after "
          << decode(std::vector<TokenId>(ids.begin(), ids.begin() + i));
    }
    EXPECT_TRUE(constraint->accept(kEos));
    const Parsed parsed = parse(format, decode(ids));
    ASSERT_EQ(parsed.calls.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(parsed.calls[i].name, names[i]);
      EXPECT_EQ(invalid_call(parsed.calls[i]), "");
    }
  }

  // Random walks after `prefix`: any allowed token each step (the end with probability 1/2 once
  // allowed). Returns the outputs parsed; every call must be valid.
  std::vector<Parsed> walk(ToolCallFormat format, const ToolRequest& request, int walks,
                           const std::string& prefix = "") {
    std::vector<Parsed> outputs;
    std::unique_ptr<ConstraintCompiler> compiler = compiler_for(format);
    std::mt19937_64 rng(7);
    for (int w = 0; w < walks; ++w) {
      std::unique_ptr<TokenConstraint> constraint = start(*compiler, format, request);
      if (constraint == nullptr) return outputs;
      std::vector<TokenId> ids;
      for (TokenId id : tokenizer_->encode(prefix)) {
        EXPECT_TRUE(constraint->accept(id)) << prefix;
        ids.push_back(id);
      }
      bool ended = false;
      for (int step = 0; step < 3000 && !ended; ++step) {
        const std::vector<TokenId> options = allowed(*constraint);
        if (options.empty()) {
          ADD_FAILURE() << "nothing allowed after " << decode(ids);
          return outputs;
        }
        const bool may_end = std::find(options.begin(), options.end(), kEos) != options.end();
        // Control tokens that are not markers are never allowed (a marker written where it
        // does not belong would break the parse checked below).
        for (TokenId id : options) {
          EXPECT_NE(id, tokenizer_->vocabulary().find("<|unrelated_control|>"));
          EXPECT_NE(id, 1);
        }
        TokenId token;
        if (may_end && (options.size() == 1 || rng() % 2 == 0)) {
          token = kEos;
        } else {
          std::vector<TokenId> text;
          for (TokenId id : options) {
            if (id != kEos) text.push_back(id);
          }
          token = text[rng() % text.size()];
        }
        EXPECT_TRUE(constraint->accept(token));
        if (token == kEos) {
          ended = true;
        } else {
          ids.push_back(token);
        }
      }
      EXPECT_TRUE(ended) << "no end after 3000 tokens: " << decode(ids);
      outputs.push_back(parse(format, decode(ids)));
      for (const Call& call : outputs.back().calls) {
        EXPECT_EQ(invalid_call(call), "") << decode(ids);
      }
      EXPECT_FALSE(outputs.back().incomplete) << decode(ids);
    }
    return outputs;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(ToolCallingTest, MarkersAreTheVocabularysControlTokens) {
  const Vocabulary& vocabulary = tokenizer_->vocabulary();
  EXPECT_EQ(tool_marker_tokens(ToolCallFormat::kKimiK2, vocabulary).size(), 5u);
  EXPECT_EQ(tool_marker_tokens(ToolCallFormat::kMistralArgs, vocabulary).size(), 2u);
  // Hermes' markers are text in this vocabulary.
  EXPECT_TRUE(tool_marker_tokens(ToolCallFormat::kHermes, vocabulary).empty());
}

TEST_F(ToolCallingTest, CanonicalAnswersAreAcceptedAndParse) {
  const ToolRequest required = tool_request(ToolRequest::Choice::kRequired);
  expect_accepted(ToolCallFormat::kMistral, required,
                  R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, {"name": "get_time", "arguments": {"zone": 9}}])",
                  {"get_weather", "get_time"});
  expect_accepted(ToolCallFormat::kMistralArgs, required,
                  R"([TOOL_CALLS]get_time[ARGS]{"zone": -3}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome", "unit": "f"})",
                  {"get_time", "get_weather"});
  expect_accepted(ToolCallFormat::kDeepSeekV3, required,
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                  "```json\n{\"zone\": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
                  "<｜tool▁sep｜>get_time\n```json\n{\"zone\": 2}\n```<｜tool▁call▁end｜>"
                  "<｜tool▁calls▁end｜>",
                  {"get_time", "get_time"});
  expect_accepted(ToolCallFormat::kDeepSeekV31, required,
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                  "{\"city\": \"Oslo\", \"unit\": \"c\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                  {"get_weather"});
  expect_accepted(ToolCallFormat::kKimiK2, required,
                  "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
                  "<|tool_call_argument_begin|>{\"zone\": 0}<|tool_call_end|><|tool_call_begin|>"
                  "functions.get_weather:1<|tool_call_argument_begin|>{\"city\": \"Lima\", "
                  "\"unit\": \"f\"}<|tool_call_end|><|tool_calls_section_end|>",
                  {"get_time", "get_weather"});
  expect_accepted(ToolCallFormat::kLlama3Json, required,
                  R"({"name": "get_time", "parameters": {"zone": 5}})", {"get_time"});
  // auto: text first, then the calls.
  const ToolRequest automatic = tool_request(ToolRequest::Choice::kAuto);
  expect_accepted(ToolCallFormat::kKimiK2, automatic,
                  "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>"
                  "functions.get_time:0<|tool_call_argument_begin|>{\"zone\": 3}<|tool_call_end|>"
                  "<|tool_calls_section_end|>",
                  {"get_time"});
  expect_accepted(ToolCallFormat::kMistralArgs, automatic,
                  R"(Sure.[TOOL_CALLS]get_time[ARGS]{"zone": 4})", {"get_time"});
  expect_accepted(ToolCallFormat::kLlama3Json, automatic,
                  R"(<|python_tag|>{"name": "get_time", "parameters": {"zone": 5}})", {"get_time"});
  expect_accepted(ToolCallFormat::kDeepSeekV31, automatic, "No call needed.", {});
}

TEST_F(ToolCallingTest, RequiredAndNamedChoicesRefuseText) {
  for (ToolCallFormat format : {ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs,
                                ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31,
                                ToolCallFormat::kKimiK2}) {
    SCOPED_TRACE(tool_call_format_name(format));
    std::unique_ptr<ConstraintCompiler> compiler = compiler_for(format);
    for (const ToolRequest& request :
         {tool_request(ToolRequest::Choice::kRequired),
          tool_request(ToolRequest::Choice::kNamed, true, "get_time")}) {
      std::unique_ptr<TokenConstraint> constraint = start(*compiler, format, request);
      ASSERT_NE(constraint, nullptr);
      // Only the first marker may start the answer.
      const std::vector<TokenId> options = allowed(*constraint);
      ASSERT_EQ(options.size(), 1u);
      EXPECT_EQ(tokenizer_->vocabulary().tokens[options[0]], tool_call_markers(format)[0]);
      EXPECT_FALSE(constraint->accept(tokenizer_->encode("Hi")[0]));
      EXPECT_FALSE(constraint->accept(kEos));
    }
  }
}

TEST_F(ToolCallingTest, RandomWalksEndInValidCalls) {
  for (ToolCallFormat format : {ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs,
                                ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31,
                                ToolCallFormat::kKimiK2, ToolCallFormat::kLlama3Json}) {
    SCOPED_TRACE(tool_call_format_name(format));
    for (const std::vector<Parsed>& outputs :
         {walk(format, tool_request(ToolRequest::Choice::kRequired), 6),
          walk(format, tool_request(ToolRequest::Choice::kNamed, true, "get_weather"), 3),
          walk(format, tool_request(ToolRequest::Choice::kRequired, false), 3)}) {
      ASSERT_FALSE(outputs.empty());
      for (const Parsed& parsed : outputs) {
        EXPECT_GE(parsed.calls.size(), 1u);
        EXPECT_EQ(parsed.text, "");
      }
    }
    const std::vector<Parsed> named =
        walk(format, tool_request(ToolRequest::Choice::kNamed, true, "get_weather"), 3);
    for (const Parsed& parsed : named) {
      ASSERT_EQ(parsed.calls.size(), 1u);
      EXPECT_EQ(parsed.calls[0].name, "get_weather");
    }
    for (const Parsed& parsed : walk(format, tool_request(ToolRequest::Choice::kRequired, false), 3)) {
      EXPECT_EQ(parsed.calls.size(), 1u);
    }
  }
}

TEST_F(ToolCallingTest, AutoConstrainsCallsAfterText) {
  // After text, the walk is free to write the first marker; once it does, calls are enforced.
  for (ToolCallFormat format : {ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs,
                                ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31,
                                ToolCallFormat::kKimiK2}) {
    SCOPED_TRACE(tool_call_format_name(format));
    const std::string begin(tool_call_markers(format)[0]);
    for (const Parsed& parsed : walk(format, tool_request(ToolRequest::Choice::kAuto),
                                     4, "Checking." + begin)) {
      EXPECT_EQ(parsed.text, "Checking.");
      EXPECT_GE(parsed.calls.size(), 1u);
    }
    // Plain text stays possible, and the other markers are not written in it.
    std::unique_ptr<ConstraintCompiler> compiler = compiler_for(format);
    std::unique_ptr<TokenConstraint> constraint =
        start(*compiler, format, tool_request(ToolRequest::Choice::kAuto));
    ASSERT_NE(constraint, nullptr);
    for (TokenId id : tokenizer_->encode("Fine.")) ASSERT_TRUE(constraint->accept(id));
    const std::vector<TokenId> options = allowed(*constraint);
    for (TokenId marker : tool_marker_tokens(format, tokenizer_->vocabulary())) {
      const bool is_begin = tokenizer_->vocabulary().tokens[marker] == begin;
      EXPECT_EQ(std::find(options.begin(), options.end(), marker) != options.end(), is_begin)
          << tokenizer_->vocabulary().tokens[marker];
    }
    EXPECT_TRUE(constraint->accept(kEos));
  }
}

TEST_F(ToolCallingTest, AutoWithResponseFormatIsCallsOrThatAnswer) {
  const ConstraintSpec response{ConstraintSpec::Kind::kJsonSchema,
                                R"({"type":"object","properties":{"answer":{"enum":["yes","no"]}},)"
                                R"("required":["answer"],"additionalProperties":false})"};
  for (ToolCallFormat format : {ToolCallFormat::kGeneric, ToolCallFormat::kKimiK2,
                                ToolCallFormat::kMistral, ToolCallFormat::kLlama3Json}) {
    SCOPED_TRACE(tool_call_format_name(format));
    std::unique_ptr<ConstraintCompiler> compiler = compiler_for(format);
    Result<std::optional<ConstraintSpec>> spec = tool_call_constraint(
        format, tool_request(ToolRequest::Choice::kAuto), &tokenizer_->vocabulary(), &response);
    ASSERT_TRUE(spec.ok() && spec->has_value()) << spec.status().message();
    Result<std::shared_ptr<const CompiledConstraint>> grammar =
        compiler->compile(**spec, std::chrono::seconds(30));
    ASSERT_TRUE(grammar.ok()) << grammar.status().message();
    // The response_format's answer is accepted to its end; plain text is not.
    std::unique_ptr<TokenConstraint> constraint = compiler->start(*grammar);
    for (TokenId id : tokenizer_->encode(R"({"answer": "no"})")) ASSERT_TRUE(constraint->accept(id));
    EXPECT_TRUE(constraint->accept(kEos));
    constraint = compiler->start(*grammar);
    EXPECT_FALSE(constraint->accept(tokenizer_->encode("Hello")[0]));
    // A call is accepted too.
    const std::string call =
        format == ToolCallFormat::kGeneric ? "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": 1}}\n</tool_call>"
        : format == ToolCallFormat::kKimiK2
            ? "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
              "<|tool_call_argument_begin|>{\"zone\": 1}<|tool_call_end|><|tool_calls_section_end|>"
        : format == ToolCallFormat::kMistral
            ? R"([TOOL_CALLS] [{"name": "get_time", "arguments": {"zone": 1}}])"
            : R"({"name": "get_time", "parameters": {"zone": 1}})";
    constraint = compiler->start(*grammar);
    for (TokenId id : tokenizer_->encode(call)) ASSERT_TRUE(constraint->accept(id)) << call;
    EXPECT_TRUE(constraint->accept(kEos));
    EXPECT_EQ(parse(format, call).calls.size(), 1u);
  }
}

TEST_F(ToolCallingTest, MarkersAreNotTextInOtherGrammars) {
  // A JSON answer on the same compiler: marker tokens never allowed inside it.
  std::unique_ptr<ConstraintCompiler> compiler = compiler_for(ToolCallFormat::kKimiK2);
  Result<std::shared_ptr<const CompiledConstraint>> grammar = compiler->compile(
      ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, R"({"type":"string"})"},
      std::chrono::seconds(30));
  ASSERT_TRUE(grammar.ok());
  std::unique_ptr<TokenConstraint> constraint = compiler->start(*grammar);
  ASSERT_TRUE(constraint->accept(tokenizer_->encode("\"")[0]));
  const std::vector<TokenId> options = allowed(*constraint);
  for (TokenId marker : tool_marker_tokens(ToolCallFormat::kKimiK2, tokenizer_->vocabulary())) {
    EXPECT_EQ(std::find(options.begin(), options.end(), marker), options.end());
    EXPECT_FALSE(constraint->accept(marker));
  }
}

TEST_F(ToolCallingTest, MarkersAsTextWhenTheVocabularyLacksThem) {
  // The Kimi-K2 format on a vocabulary without its tokens (a template on another model): the
  // markers are written as text.
  Result<std::optional<ConstraintSpec>> spec = tool_call_constraint(
      ToolCallFormat::kKimiK2, tool_request(ToolRequest::Choice::kRequired), nullptr);
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(spec->has_value());
  EXPECT_NE((*spec)->source.find(R"({"type":"const_string","value":"<|tool_calls_section_begin|>"})"),
            std::string::npos);
  EXPECT_EQ((*spec)->source.find(R"("type":"token")"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::server
