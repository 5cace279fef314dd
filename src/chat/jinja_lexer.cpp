#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja_error.h"
#include "chat/python_text.h"

namespace tachyon::jinja {

std::string normalize_template_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

// Decodes the code point at `pos` (source is valid UTF-8); sets its byte length.
char32_t code_point_at(std::string_view s, size_t pos, size_t* length) {
  const auto byte = static_cast<unsigned char>(s[pos]);
  size_t n = byte < 0x80 ? 1 : (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : 4;
  n = std::min(n, s.size() - pos);
  *length = n;
  return utf8_decode(s.substr(pos, n))[0];
}

// Byte length of the whitespace code point at `pos`, 0 when there is none.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t length = 0;
  const char32_t cp = code_point_at(s, pos, &length);
  return is_python_space(cp) ? length : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

// Python str.rstrip() with no arguments.
std::string_view rstrip_spaces(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t length = 0;
    if (!is_python_space(code_point_at(s, start, &length))) break;
    end = start;
  }
  return s.substr(0, end);
}

int count_newlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool starts_with_at(std::string_view s, size_t pos, std::string_view prefix) {
  return s.substr(pos, prefix.size()) == prefix;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Matches `\d+(_\d+)*` at pos; returns the end or npos.
size_t match_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return std::string_view::npos;
  size_t i = pos;
  while (true) {
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) {
      ++i;
      continue;
    }
    return i;
  }
}

// jinja2's float_re; returns the end or npos.
size_t match_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return std::string_view::npos;
  size_t i = match_digits(s, pos);
  if (i == std::string_view::npos) return i;
  auto match_exponent = [&](size_t at) -> size_t {
    if (at >= s.size() || (s[at] != 'e' && s[at] != 'E')) return std::string_view::npos;
    ++at;
    if (at < s.size() && (s[at] == '+' || s[at] == '-')) ++at;
    return match_digits(s, at);
  };
  if (i < s.size() && s[i] == '.') {
    const size_t fraction_end = match_digits(s, i + 1);
    if (fraction_end != std::string_view::npos) {
      const size_t exponent_end = match_exponent(fraction_end);
      return exponent_end != std::string_view::npos ? exponent_end : fraction_end;
    }
    return std::string_view::npos;
  }
  return match_exponent(i);
}

// jinja2's integer_re; returns the end or npos.
size_t match_integer(std::string_view s, size_t pos, int* base) {
  if (pos >= s.size() || !is_digit(s[pos])) return std::string_view::npos;
  auto prefixed = [&](char letter, auto is_valid) -> size_t {
    if (pos + 1 >= s.size() || std::tolower(static_cast<unsigned char>(s[pos + 1])) != letter) {
      return std::string_view::npos;
    }
    size_t i = pos + 2;
    size_t end = std::string_view::npos;
    while (true) {
      size_t j = i;
      if (j < s.size() && s[j] == '_') ++j;
      if (j < s.size() && is_valid(static_cast<unsigned char>(s[j]))) {
        i = j + 1;
        end = i;
      } else {
        return end;
      }
    }
  };
  if (s[pos] == '0') {
    size_t end = prefixed('b', [](unsigned char c) { return c == '0' || c == '1'; });
    if (end != std::string_view::npos) return *base = 2, end;
    end = prefixed('o', [](unsigned char c) { return c >= '0' && c <= '7'; });
    if (end != std::string_view::npos) return *base = 8, end;
    end = prefixed('x', [](unsigned char c) { return std::isxdigit(c) != 0; });
    if (end != std::string_view::npos) return *base = 16, end;
    size_t i = pos + 1;
    while (true) {
      size_t j = i;
      if (j < s.size() && s[j] == '_') ++j;
      if (j < s.size() && s[j] == '0') {
        i = j + 1;
      } else {
        break;
      }
    }
    *base = 10;
    return i;
  }
  size_t i = pos + 1;
  while (true) {
    size_t j = i;
    if (j < s.size() && s[j] == '_') ++j;
    if (j < s.size() && is_digit(s[j])) {
      i = j + 1;
    } else {
      break;
    }
  }
  *base = 10;
  return i;
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal body, after jinja2's backslashreplace
// of non-ASCII characters.
std::string decode_string_literal(std::string_view body, int line) {
  std::string out;
  size_t i = 0;
  while (i < body.size()) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    const char next = body[i + 1];
    i += 2;
    if (static_cast<unsigned char>(next) >= 0x80) {
      // "\é" became "\\xe9" before decoding, so it decodes to the text "\xe9".
      size_t length = 0;
      const char32_t cp = code_point_at(body, i - 1, &length);
      char buffer[16];
      std::snprintf(buffer, sizeof(buffer),
                    cp <= 0xFF     ? "\\x%02x"
                    : cp <= 0xFFFF ? "\\u%04x"
                                   : "\\U%08x",
                    static_cast<unsigned>(cp));
      out += buffer;
      i += length - 1;
      continue;
    }
    auto read_hex = [&](int digits) -> char32_t {
      uint32_t value = 0;
      for (int k = 0; k < digits; ++k) {
        const int h = i < body.size() ? hex_value(body[i]) : -1;
        if (h < 0) throw TemplateError(line, "truncated escape sequence in string literal");
        value = value * 16 + static_cast<uint32_t>(h);
        ++i;
      }
      if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
        throw TemplateError(line, "invalid code point escape in string literal");
      }
      return value;
    };
    switch (next) {
      case '\n':
        break;  // line continuation
      case '\\':
      case '\'':
      case '"':
        out.push_back(next);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
        utf8_append(read_hex(2), out);
        break;
      case 'u':
        utf8_append(read_hex(4), out);
        break;
      case 'U':
        utf8_append(read_hex(8), out);
        break;
      case 'N':
        throw TemplateError(line, "unsupported \\N{...} escape in string literal");
      default:
        if (next >= '0' && next <= '7') {
          uint32_t value = static_cast<uint32_t>(next - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            value = value * 8 + static_cast<uint32_t>(body[i++] - '0');
          }
          utf8_append(value, out);
        } else {
          out.push_back('\\');
          out.push_back(next);
        }
    }
  }
  return out;
}

class LexerState {
 public:
  explicit LexerState(std::string source) : source_(std::move(source)) {}

  std::vector<Token> run() {
    const std::string_view s = source_;
    while (pos_ < s.size()) {
      lex_root();
    }
    push(TokenType::kEof, "");
    return std::move(tokens_);
  }

 private:
  enum class TagKind { kComment, kBlock, kVariable, kRaw };

  void push(TokenType type, std::string text) {
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.line = line_;
    tokens_.push_back(std::move(token));
  }

  // Emits the text before a tag, applying `-` stripping or lstrip_blocks.
  void emit_text_before_tag(std::string_view text, char sign, bool is_variable) {
    std::string_view kept = text;
    if (sign == '-') {
      kept = rstrip_spaces(text);
    } else if (sign != '+' && !is_variable) {
      const size_t newline = text.rfind('\n');
      const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
      if (line_start > 0 || line_starting_) {
        const std::string_view tail = text.substr(line_start);
        if (std::all_of(tail.begin(), tail.end(), [](char c) { return c == ' ' || c == '\t'; })) {
          kept = text.substr(0, line_start);
        }
      }
    }
    if (!kept.empty()) push(TokenType::kData, std::string(kept));
    line_ += count_newlines(text);
  }

  // Matches `{%(-|+|)\s*raw\s*(-%}\s*|%})` at pos; returns the end or npos.
  size_t match_raw_begin(size_t pos) const {
    const std::string_view s = source_;
    size_t i = pos + 2;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    i = skip_spaces(s, i);
    if (!starts_with_at(s, i, "raw")) return std::string_view::npos;
    i = skip_spaces(s, i + 3);
    if (starts_with_at(s, i, "-%}")) return skip_spaces(s, i + 3);
    if (starts_with_at(s, i, "%}")) return i + 2;
    return std::string_view::npos;
  }

  void lex_root() {
    const std::string_view s = source_;
    size_t p = pos_;
    while (true) {
      p = s.find('{', p);
      if (p == std::string_view::npos || p + 1 >= s.size()) {
        // Trailing text.
        push(TokenType::kData, std::string(s.substr(pos_)));
        line_ += count_newlines(s.substr(pos_));
        pos_ = s.size();
        return;
      }
      const char c = s[p + 1];
      if (c == '%' || c == '{' || c == '#') break;
      ++p;
    }
    const char opener = s[p + 1];
    char sign = p + 2 < s.size() ? s[p + 2] : '\0';
    if (sign != '-' && sign != '+') sign = '\0';
    TagKind kind = opener == '#'   ? TagKind::kComment
                   : opener == '{' ? TagKind::kVariable
                                   : TagKind::kBlock;
    size_t raw_end = std::string_view::npos;
    if (kind == TagKind::kBlock) {
      raw_end = match_raw_begin(p);
      if (raw_end != std::string_view::npos) kind = TagKind::kRaw;
    }
    emit_text_before_tag(s.substr(pos_, p - pos_), sign, kind == TagKind::kVariable);
    const size_t after_opener = p + 2 + (sign ? 1 : 0);
    switch (kind) {
      case TagKind::kComment:
        lex_comment(after_opener);
        break;
      case TagKind::kRaw:
        line_ += count_newlines(s.substr(p, raw_end - p));
        line_starting_ = s[raw_end - 1] == '\n';
        lex_raw(raw_end);
        break;
      case TagKind::kBlock:
        push(TokenType::kBlockBegin, "{%");
        line_starting_ = false;
        lex_tag(after_opener, /*is_block=*/true);
        break;
      case TagKind::kVariable:
        push(TokenType::kVariableBegin, "{{");
        line_starting_ = false;
        lex_tag(after_opener, /*is_block=*/false);
        break;
    }
  }

  // Matches a block end at pos (`+%}`, `-%}\s*`, `%}\n?`); returns its end or npos.
  size_t match_block_end(size_t pos) const {
    const std::string_view s = source_;
    if (starts_with_at(s, pos, "+%}")) return pos + 3;
    if (starts_with_at(s, pos, "-%}")) return skip_spaces(s, pos + 3);
    if (starts_with_at(s, pos, "%}")) {
      return pos + 2 + (pos + 2 < s.size() && s[pos + 2] == '\n' ? 1 : 0);
    }
    return std::string_view::npos;
  }

  void lex_comment(size_t start) {
    const std::string_view s = source_;
    for (size_t i = start; i < s.size(); ++i) {
      size_t end = std::string_view::npos;
      if (starts_with_at(s, i, "+#}")) {
        end = i + 3;
      } else if (starts_with_at(s, i, "-#}")) {
        end = skip_spaces(s, i + 3);
      } else if (starts_with_at(s, i, "#}")) {
        end = i + 2 + (i + 2 < s.size() && s[i + 2] == '\n' ? 1 : 0);
      }
      if (end != std::string_view::npos) {
        line_ += count_newlines(s.substr(pos_, end - pos_));
        line_starting_ = s[end - 1] == '\n';
        pos_ = end;
        return;
      }
    }
    throw TemplateError(line_, "missing end of comment tag");
  }

  void lex_raw(size_t start) {
    const std::string_view s = source_;
    for (size_t i = start; i < s.size(); ++i) {
      if (!starts_with_at(s, i, "{%")) continue;
      size_t j = i + 2;
      char sign = '\0';
      if (j < s.size() && (s[j] == '-' || s[j] == '+')) sign = s[j++];
      j = skip_spaces(s, j);
      if (!starts_with_at(s, j, "endraw")) continue;
      j = skip_spaces(s, j + 6);
      const size_t end = match_block_end(j);
      if (end == std::string_view::npos) continue;
      emit_text_before_tag(s.substr(start, i - start), sign, false);
      line_ += count_newlines(s.substr(i, end - i));
      line_starting_ = s[end - 1] == '\n';
      pos_ = end;
      return;
    }
    throw TemplateError(line_, "missing end of raw directive");
  }

  void lex_tag(size_t start, bool is_block) {
    const std::string_view s = source_;
    size_t i = start;
    std::vector<char> balance;  // expected closing brackets
    while (true) {
      if (i >= s.size()) {
        throw TemplateError(line_, is_block ? "unexpected end of template inside a {% %} tag"
                                            : "unexpected end of template inside a {{ }} tag");
      }
      if (balance.empty()) {
        size_t end = std::string_view::npos;
        if (is_block) {
          end = match_block_end(i);
        } else if (starts_with_at(s, i, "-}}")) {
          end = skip_spaces(s, i + 3);
        } else if (starts_with_at(s, i, "}}")) {
          end = i + 2;
        }
        if (end != std::string_view::npos) {
          push(is_block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "");
          line_ += count_newlines(s.substr(i, end - i));
          line_starting_ = s[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (space_at(s, i) > 0) {
        const size_t end = skip_spaces(s, i);
        line_ += count_newlines(s.substr(i, end - i));
        i = end;
        continue;
      }
      line_starting_ = false;
      if (size_t end = match_float(s, i); end != std::string_view::npos) {
        std::string digits;
        for (char c : s.substr(i, end - i)) {
          if (c != '_') digits.push_back(c);
        }
        push(TokenType::kFloat, std::string(s.substr(i, end - i)));
        tokens_.back().float_value = std::strtod(digits.c_str(), nullptr);
        i = end;
        continue;
      }
      int base = 10;
      if (size_t end = match_integer(s, i, &base); end != std::string_view::npos) {
        std::string digits;
        for (char c : s.substr(i + (base == 10 ? 0 : 2), end - i - (base == 10 ? 0 : 2))) {
          if (c != '_') digits.push_back(c);
        }
        errno = 0;
        const unsigned long long value = std::strtoull(digits.c_str(), nullptr, base);
        if (errno != 0 || value > static_cast<unsigned long long>(INT64_MAX)) {
          throw TemplateError(
              line_, "integer literal " + std::string(s.substr(i, end - i)) + " is too large");
        }
        push(TokenType::kInteger, std::string(s.substr(i, end - i)));
        tokens_.back().int_value = static_cast<int64_t>(value);
        i = end;
        continue;
      }
      if (is_name_start(s[i])) {
        size_t end = i + 1;
        while (end < s.size() && is_name_char(s[end])) ++end;
        push(TokenType::kName, std::string(s.substr(i, end - i)));
        i = end;
        continue;
      }
      if (s[i] == '\'' || s[i] == '"') {
        const char quote = s[i];
        size_t j = i + 1;
        while (j < s.size() && s[j] != quote) j += s[j] == '\\' ? 2 : 1;
        if (j >= s.size()) throw TemplateError(line_, "unterminated string literal");
        push(TokenType::kString, decode_string_literal(s.substr(i + 1, j - i - 1), line_));
        line_ += count_newlines(s.substr(i, j + 1 - i));
        i = j + 1;
        continue;
      }
      static constexpr std::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (std::string_view op : kTwoCharOperators) {
        if (starts_with_at(s, i, op)) {
          push(TokenType::kOperator, std::string(op));
          i += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static constexpr std::string_view kOneCharOperators = "+-/*%~[](){}><=.:|,;";
      const char c = s[i];
      if (kOneCharOperators.find(c) == std::string_view::npos) {
        throw TemplateError(line_, "unexpected character '" + std::string(1, c) + "'");
      }
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) throw TemplateError(line_, "unexpected '" + std::string(1, c) + "'");
        if (balance.back() != c) {
          throw TemplateError(line_, "unexpected '" + std::string(1, c) + "', expected '" +
                                         std::string(1, balance.back()) + "'");
        }
        balance.pop_back();
      }
      push(TokenType::kOperator, std::string(1, c));
      ++i;
    }
  }

  std::string source_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> JinjaLexer::tokenize(std::string_view source) {
  return LexerState(normalize_template_newlines(source)).run();
}

}  // namespace tachyon::jinja
