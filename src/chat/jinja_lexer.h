// JinjaLexer: template source → tokens, reproducing jinja2's lexer with trim_blocks=True and
// lstrip_blocks=True (newline normalisation, the single trailing newline dropped, `-`/`+`
// whitespace control, {% raw %}, comments).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::jinja {

enum class TokenType {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // text holds the decoded value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text holds the operator, e.g. "//" or "("
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

class JinjaLexer {
 public:
  // Throws TemplateError naming the line on malformed input.
  static std::vector<Token> tokenize(std::string_view source);
};

// The source as jinja2 sees it: \r\n and \r become \n, and one trailing newline is dropped.
std::string normalize_template_newlines(std::string_view source);

}  // namespace tachyon::jinja
