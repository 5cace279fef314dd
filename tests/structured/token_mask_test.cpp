// Token masks against a slow exhaustive reference: a token is allowed next iff its bytes keep
// the parser alive (XGrammar's byte-level matcher fed the token's text on a fork of the state),
// an end-of-generation token iff the output is complete, any other special token never. Random
// walks through JSON schemas (fixed and randomly generated ones), a regex and a grammar, over
// the default model's 49K-token vocabulary and Gemma 3's 262K-token one, both with the real
// tokenizers' token bytes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <xgrammar/matcher.h>

#include "structured/constraint_compiler.h"
#include "core/paths.h"
#include "model_files/gguf_file.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

struct LoadedVocabulary {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<TokenId> end_of_generation;
  std::unique_ptr<ConstraintCompiler> compiler;
};

LoadedVocabulary load(const std::string& path) {
  LoadedVocabulary loaded;
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  EXPECT_TRUE(file.ok()) << path << ": " << file.status().message() << " (run `make setup`)";
  if (!file.ok()) return loaded;
  loaded.file = std::move(*file);
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*loaded.file);
  EXPECT_TRUE(tokenizer.ok());
  loaded.tokenizer = std::move(*tokenizer);
  loaded.end_of_generation = Generator::end_of_generation_tokens(loaded.tokenizer->vocabulary());
  // A row wider than the vocabulary, as models pad theirs: the extra ids are never allowed.
  Result<std::unique_ptr<ConstraintCompiler>> compiler =
      ConstraintCompiler::create(*loaded.tokenizer, loaded.end_of_generation,
                                 loaded.tokenizer->vocabulary_size() + 5);
  EXPECT_TRUE(compiler.ok()) << compiler.status().message();
  loaded.compiler = std::move(*compiler);
  return loaded;
}

const std::vector<ConstraintSpec>& specs() {
  using Kind = ConstraintSpec::Kind;
  static const std::vector<ConstraintSpec> all = {
      {Kind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
       R"("age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array",)"
       R"("items":{"enum":["a","b c","d\"e"]},"maxItems":3}},"required":["name","age"],)"
       R"("additionalProperties":false})"},
      {Kind::kJsonSchema,
       R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"number"},"c":{"type":)"
       R"("array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["v","c"]}},)"
       R"("anyOf":[{"$ref":"#/$defs/n"},{"type":"string","format":"date"},{"type":"null"}]})"},
      {Kind::kJsonObject, ""},
      {Kind::kRegex, R"((\+[0-9]{1,3} )?[0-9]{3}-[0-9]{4}|[a-z]+@[a-z]+\.(com|org))"},
      {Kind::kGrammar, "root ::= item (\", \" item)* \".\"\nitem ::= [a-z]+ | \"\\\"\" [^\"\\n]* \"\\\"\""},
      // Free text with tagged regions (tool calls): control tokens stay out of the free text.
      {Kind::kStructuralTag,
       R"({"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<f="],)"
       R"("tags":[{"type":"tag","begin":"<f=a>","content":{"type":"json_schema","json_schema":)"
       R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"end":"</f>"}]}})"},
  };
  return all;
}

// Walks `steps` tokens through `spec`, comparing every mask with the exhaustive reference.
void walk_and_compare(LoadedVocabulary& loaded, const ConstraintSpec& spec, int steps,
                      uint64_t seed) {
  Result<std::shared_ptr<const CompiledConstraint>> grammar =
      loaded.compiler->compile(spec, std::chrono::seconds(60));
  ASSERT_TRUE(grammar.ok()) << grammar.status().message();
  std::unique_ptr<TokenConstraint> constraint = loaded.compiler->start(*grammar);
  xgrammar::GrammarMatcher reference((*grammar)->grammar);

  const Tokenizer& tokenizer = *loaded.tokenizer;
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  const int32_t width = loaded.compiler->logits_size();
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(width));
  std::string text;
  for (int step = 0; step < steps; ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits);
    std::vector<TokenId> allowed;
    int mismatches = 0;
    // A token whose first byte the matcher rejects is rejected whole (it reads bytes in order),
    // so one fork per first byte settles most of a large vocabulary; the rest fork per token.
    std::array<int8_t, 256> first_byte_accepted;
    first_byte_accepted.fill(-1);
    for (TokenId id = 0; id < width; ++id) {
      const bool masked_in = std::isfinite(logits[static_cast<size_t>(id)]);
      bool expected;
      if (id >= vocabulary.size()) {
        expected = false;
      } else if (std::find(loaded.end_of_generation.begin(), loaded.end_of_generation.end(),
                           id) != loaded.end_of_generation.end()) {
        expected = reference.IsCompleted();
      } else {
        const TokenType type = vocabulary.types[static_cast<size_t>(id)];
        const std::string bytes = tokenizer.token_bytes(id);
        if (type == TokenType::kControl || type == TokenType::kUnknown ||
            type == TokenType::kUnused || bytes.empty()) {
          expected = false;
        } else {
          int8_t& first = first_byte_accepted[static_cast<uint8_t>(bytes[0])];
          if (first < 0) first = reference.Fork().AcceptString(bytes.substr(0, 1)) ? 1 : 0;
          expected = first == 1 && (bytes.size() == 1 || reference.Fork().AcceptString(bytes));
        }
      }
      if (masked_in != expected && ++mismatches <= 5) {
        ADD_FAILURE() << spec.key() << " after " << testing::PrintToString(text) << ": token "
                      << id << " " << testing::PrintToString(tokenizer.token_bytes(id))
                      << (masked_in ? " allowed by the mask" : " masked out")
                      << " but the byte-level check says the opposite";
      }
      if (masked_in) allowed.push_back(id);
    }
    ASSERT_EQ(mismatches, 0);
    ASSERT_FALSE(allowed.empty()) << "nothing allowed after " << text;
    // Prefer text tokens (ending early would make short walks); end when nothing else is left.
    std::vector<TokenId> text_tokens;
    for (TokenId id : allowed) {
      if (std::find(loaded.end_of_generation.begin(), loaded.end_of_generation.end(), id) ==
          loaded.end_of_generation.end()) {
        text_tokens.push_back(id);
      }
    }
    const std::vector<TokenId>& choices = text_tokens.empty() ? allowed : text_tokens;
    const TokenId token = choices[rng() % choices.size()];
    ASSERT_TRUE(constraint->accept(token));
    ASSERT_TRUE(reference.AcceptToken(token));
    // Every other step the next mask is built in the background first, as the engine does.
    if (step % 2 == 0) constraint->prepare_mask();
    if (constraint->is_terminated()) break;
    text += tokenizer.token_bytes(token);
  }
  // Rollback returns to an earlier state: the mask after it is the mask seen then.
  if (!constraint->is_terminated() && text.size() > 0) {
    std::vector<float> before(static_cast<size_t>(width), 0.0f);
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits);
    // Accept one more allowed token, roll it back, and compare.
    TokenId next = -1;
    for (TokenId id = 0; id < width && next < 0; ++id) {
      if (std::isfinite(logits[static_cast<size_t>(id)]) &&
          std::find(loaded.end_of_generation.begin(), loaded.end_of_generation.end(), id) ==
              loaded.end_of_generation.end()) {
        next = id;
      }
    }
    if (next >= 0) {
      ASSERT_TRUE(constraint->accept(next));
      constraint->rollback(1);
      constraint->mask(before);
      for (size_t i = 0; i < logits.size(); ++i) {
        ASSERT_EQ(std::isfinite(logits[i]), std::isfinite(before[i])) << i;
      }
    }
  }
}

// A random schema from the features response_format supports: objects with required and
// optional properties, arrays with bounds, enums, const, anyOf, strings with lengths, patterns
// or formats, bounded integers and numbers, booleans, nulls, and $ref into $defs.
boost::json::value random_schema(std::mt19937_64& rng, int depth, bool& uses_defs) {
  namespace json = boost::json;
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const int kind = depth >= 3 ? 2 + pick(8) : pick(10);
  switch (kind) {
    case 0: {  // object
      json::object properties;
      json::array required;
      const int count = 1 + pick(3);
      for (int i = 0; i < count; ++i) {
        const std::string name = std::string(1, static_cast<char>('a' + pick(26))) +
                                 std::to_string(i);
        properties[name] = random_schema(rng, depth + 1, uses_defs);
        if (pick(3) != 0) required.push_back(json::string(name));
      }
      return json::object{{"type", "object"},
                          {"properties", std::move(properties)},
                          {"required", std::move(required)},
                          {"additionalProperties", false}};
    }
    case 1: {  // array
      const int low = pick(2);
      return json::object{{"type", "array"},
                          {"items", random_schema(rng, depth + 1, uses_defs)},
                          {"minItems", low},
                          {"maxItems", low + 1 + pick(3)}};
    }
    case 2: {  // string
      json::object schema{{"type", "string"}};
      switch (pick(4)) {
        case 0: schema["maxLength"] = 1 + pick(8); break;
        case 1: schema["pattern"] = "^[a-c]{1,3}-[0-9]+$"; break;
        case 2: schema["format"] = pick(2) ? "date" : "ipv4"; break;
        default: break;
      }
      return schema;
    }
    case 3:
      return json::object{{"type", "integer"}, {"minimum", -pick(50)}, {"maximum", pick(500)}};
    case 4:
      return json::object{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 1 + pick(9)}};
    case 5:
      return json::object{{"type", "boolean"}};
    case 6:
      return json::object{{"enum", json::array{"x y", 3, nullptr, "quote\"d", false}}};
    case 7:
      return json::object{{"const", pick(2) ? json::value("fixed") : json::value(42)}};
    case 8: {
      json::array options;
      const int count = 2 + pick(2);
      for (int i = 0; i < count; ++i) options.push_back(random_schema(rng, depth + 1, uses_defs));
      return json::object{{"anyOf", std::move(options)}};
    }
    default:
      uses_defs = true;
      return json::object{{"$ref", "#/$defs/shared"}};
  }
}

std::vector<ConstraintSpec> random_specs(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  std::vector<ConstraintSpec> specs;
  while (static_cast<int>(specs.size()) < count) {
    bool uses_defs = false;
    boost::json::value schema = random_schema(rng, 0, uses_defs);
    if (uses_defs || !schema.is_object()) {
      boost::json::object root{{"anyOf", boost::json::array{schema, boost::json::object{
                                                                        {"type", "null"}}}}};
      boost::json::object shared{{"type", "array"}, {"items", {{"type", "integer"}}},
                                 {"maxItems", 2}};
      root["$defs"] = boost::json::object{{"shared", std::move(shared)}};
      schema = std::move(root);
    }
    specs.push_back({ConstraintSpec::Kind::kJsonSchema, boost::json::serialize(schema)});
  }
  return specs;
}

TEST(TokenMaskTest, RandomSchemasMatchTheExhaustiveCheck) {
  LoadedVocabulary loaded = load(default_model_path());
  ASSERT_TRUE(loaded.compiler);
  const std::vector<ConstraintSpec> specs = random_specs(2026, 12);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].source);
    walk_and_compare(loaded, specs[i], 8, 500 + i);
  }
  LoadedVocabulary gemma = load(tachyon_home() + "/models/gemma-3-270m-q4_k_m.gguf");
  ASSERT_TRUE(gemma.compiler);
  const std::vector<ConstraintSpec> gemma_specs = random_specs(1203, 4);
  for (size_t i = 0; i < gemma_specs.size(); ++i) {
    SCOPED_TRACE(gemma_specs[i].source);
    walk_and_compare(gemma, gemma_specs[i], 4, 900 + i);
  }
}

TEST(TokenMaskTest, DefaultModelVocabularyMatchesTheExhaustiveCheck) {
  LoadedVocabulary loaded = load(default_model_path());
  ASSERT_TRUE(loaded.compiler);
  for (size_t i = 0; i < specs().size(); ++i) {
    SCOPED_TRACE(specs()[i].key());
    for (uint64_t seed : {1u, 2u}) walk_and_compare(loaded, specs()[i], 14, seed + 10 * i);
  }
}

TEST(TokenMaskTest, GemmaVocabularyMatchesTheExhaustiveCheck) {
  LoadedVocabulary loaded = load(tachyon_home() + "/models/gemma-3-270m-q4_k_m.gguf");
  ASSERT_TRUE(loaded.compiler);
  for (size_t i = 0; i < specs().size(); ++i) {
    SCOPED_TRACE(specs()[i].key());
    walk_and_compare(loaded, specs()[i], 6, 100 + i);
  }
}

TEST(TokenMaskTest, AbandonedCompilationsFinishInTheBackground) {
  LoadedVocabulary loaded = load(default_model_path());
  ASSERT_TRUE(loaded.compiler);
  std::string properties;
  for (int i = 0; i < 30; ++i) {
    if (i > 0) properties += ",";
    properties += "\"p" + std::to_string(i) + R"(":{"type":"string","format":"date-time"})";
  }
  const ConstraintSpec spec{ConstraintSpec::Kind::kJsonSchema,
                            R"({"type":"object","properties":{)" + properties + "}}"};
  Result<std::shared_ptr<const CompiledConstraint>> late =
      loaded.compiler->compile(spec, std::chrono::milliseconds(0));
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
  // Once it has finished it is in the cache.
  Result<std::shared_ptr<const CompiledConstraint>> later =
      loaded.compiler->compile(spec, std::chrono::seconds(60));
  ASSERT_TRUE(later.ok()) << later.status().message();
  for (int i = 0; i < 200 && loaded.compiler->cache_entries() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(loaded.compiler->cache_entries(), 1u);
  // Errors name the problem and are not cached.
  Result<std::shared_ptr<const CompiledConstraint>> bad = loaded.compiler->compile(
      {ConstraintSpec::Kind::kRegex, "(a"}, std::chrono::seconds(10));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("parenthesis"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(bad.status().message().find(".cc:"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tachyon
