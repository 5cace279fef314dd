// JinjaLexer: newline normalisation, whitespace control, token kinds and line numbers.
#include "chat/jinja_lexer.h"

#include <gtest/gtest.h>

#include "chat/jinja_error.h"

namespace tachyon::jinja {
namespace {

std::string data_of(std::string_view source) {
  std::string out;
  for (const Token& token : JinjaLexer::tokenize(source)) {
    if (token.type == TokenType::kData) out += token.text;
  }
  return out;
}

TEST(JinjaLexerTest, NormalisesNewlinesAndDropsOneTrailingNewline) {
  EXPECT_EQ(normalize_template_newlines("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(normalize_template_newlines("a\n\n"), "a\n");
  EXPECT_EQ(normalize_template_newlines("a\r\n"), "a");
}

TEST(JinjaLexerTest, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(data_of("a\n  {% if x %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  // `+` keeps the indentation (lstrip) or the newline (trim).
  EXPECT_EQ(data_of("a\n  {%+ if x %}\nb{% endif +%}\nc"), "a\n  b\nc");
  // Variables are never lstripped or trimmed.
  EXPECT_EQ(data_of("a\n  {{ x }}\nb"), "a\n  \nb");
  // Text before the tag on the same line blocks lstrip.
  EXPECT_EQ(data_of("a x {% if y %}"), "a x ");
  // Comments strip like blocks.
  EXPECT_EQ(data_of("a\n  {# c #}\nb"), "a\nb");
}

TEST(JinjaLexerTest, MinusStripsAllWhitespaceIncludingUnicode) {
  EXPECT_EQ(data_of("a \n\t {{- x -}} \n b"), "ab");
  EXPECT_EQ(data_of("a\u00a0\u3000{%- if x %}"), "a");
}

TEST(JinjaLexerTest, TokensAndLines) {
  const std::vector<Token> tokens =
      JinjaLexer::tokenize("x\n{{ a.b[0] | f('s\\n', 1.5e3, 0x1F) }}\n{% if c %}");
  std::vector<TokenType> types;
  for (const Token& token : tokens) types.push_back(token.type);
  ASSERT_GE(tokens.size(), 20u);
  EXPECT_EQ(tokens[0].type, TokenType::kData);
  EXPECT_EQ(tokens[1].type, TokenType::kVariableBegin);
  EXPECT_EQ(tokens[1].line, 2);
  EXPECT_EQ(tokens[2].text, "a");
  const Token* string_token = nullptr;
  const Token* float_token = nullptr;
  const Token* int_token = nullptr;
  for (const Token& token : tokens) {
    if (token.type == TokenType::kString) string_token = &token;
    if (token.type == TokenType::kFloat) float_token = &token;
    if (token.type == TokenType::kInteger && token.int_value == 31) int_token = &token;
  }
  ASSERT_NE(string_token, nullptr);
  EXPECT_EQ(string_token->text, "s\n");
  ASSERT_NE(float_token, nullptr);
  EXPECT_EQ(float_token->float_value, 1500.0);
  EXPECT_NE(int_token, nullptr);
  EXPECT_EQ(tokens.back().type, TokenType::kEof);
  EXPECT_EQ(tokens[tokens.size() - 2].type, TokenType::kBlockEnd);
  EXPECT_EQ(tokens[tokens.size() - 2].line, 3);
}

TEST(JinjaLexerTest, BracesInsideExpressionsDoNotEndTheTag) {
  std::vector<Token> tokens = JinjaLexer::tokenize("{{ {'a': {'b': 1}} }}");
  EXPECT_EQ(tokens[tokens.size() - 2].type, TokenType::kVariableEnd);
}

TEST(JinjaLexerTest, ErrorsNameTheLine) {
  try {
    JinjaLexer::tokenize("a\nb\n{{ 'open }}");
    FAIL() << "expected an error";
  } catch (const TemplateError& error) {
    EXPECT_EQ(error.line(), 3);
  }
  EXPECT_THROW(JinjaLexer::tokenize("{# never closed"), TemplateError);
  EXPECT_THROW(JinjaLexer::tokenize("{% raw %}never closed"), TemplateError);
  EXPECT_THROW(JinjaLexer::tokenize("{{ a ) }}"), TemplateError);
  EXPECT_THROW(JinjaLexer::tokenize("{{ 99999999999999999999 }}"), TemplateError);
}

}  // namespace
}  // namespace tachyon::jinja
