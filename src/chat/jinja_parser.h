// JinjaParser: tokens → statement tree, following jinja2's grammar (precedence, tuples, filters
// and tests binding tighter than arithmetic, `is` tests, slices, call arguments, block tags).
#pragma once

#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace tachyon::jinja {

class JinjaParser {
 public:
  // Throws TemplateError naming the construct and line on a syntax error or an unsupported tag.
  static StmtList parse(const std::vector<Token>& tokens);
};

}  // namespace tachyon::jinja
