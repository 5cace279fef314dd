#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "chat/jinja_error.h"

namespace tachyon::jinja {
namespace {

// Deeper nesting than this is refused rather than risking the native stack.
constexpr int kMaxNesting = 200;

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
    case TokenType::kFloat:
      return "number";
    default:
      return "'" + token.text + "'";
  }
}

class ParserState {
 public:
  explicit ParserState(const std::vector<Token>& tokens) : tokens_(tokens) {}

  StmtList parse_template() {
    StmtList body = subparse({});
    if (current().type != TokenType::kEof) fail("unexpected " + describe(current()));
    return body;
  }

 private:
  // ---- token stream ----
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool is_op(std::string_view op) const {
    return current().type == TokenType::kOperator && current().text == op;
  }
  bool is_name(std::string_view name) const {
    return current().type == TokenType::kName && current().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError(current().line, message);
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(current()));
  }
  void expect_type(TokenType type, const char* what) {
    if (current().type != type)
      fail(std::string("expected ") + what + ", got " + describe(current()));
    advance();
  }
  std::string expect_name() {
    if (current().type != TokenType::kName) fail("expected a name, got " + describe(current()));
    return advance().text;
  }

  struct DepthGuard {
    explicit DepthGuard(ParserState& state) : state_(state) {
      if (++state_.depth_ > kMaxNesting) state_.fail("template is nested too deeply");
    }
    ~DepthGuard() { --state_.depth_; }
    ParserState& state_;
  };

  // Records the subtree height and refuses trees deep enough to strain the native stack.
  ExprPtr seal(ExprPtr node) {
    int depth = 0;
    for (const ExprPtr& child : node->children) {
      if (child) depth = std::max(depth, child->depth);
    }
    for (const ExprPtr& arg : node->args) depth = std::max(depth, arg->depth);
    for (const auto& [key, arg] : node->kwargs) depth = std::max(depth, arg->depth);
    node->depth = depth + 1;
    if (node->depth > kMaxNesting) fail("template is nested too deeply");
    return node;
  }

  ExprPtr make(ExprKind kind, int line) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    return expr;
  }

  // ---- statements ----
  StmtList subparse(std::initializer_list<std::string_view> end_tags) {
    StmtList body;
    while (true) {
      const Token& token = current();
      if (token.type == TokenType::kEof) {
        if (end_tags.size() > 0) {
          std::string names;
          for (auto tag : end_tags) {
            names.append(names.empty() ? "'" : " or '").append(tag).append("'");
          }
          fail("unexpected end of template, expected " + names);
        }
        return body;
      }
      if (token.type == TokenType::kData) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kText;
        stmt->line = token.line;
        stmt->text = token.text;
        body.push_back(std::move(stmt));
        advance();
      } else if (token.type == TokenType::kVariableBegin) {
        advance();
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kOutput;
        stmt->line = token.line;
        stmt->expr = parse_tuple(/*with_condition=*/true, {}, false);
        expect_type(TokenType::kVariableEnd, "end of print statement");
        body.push_back(std::move(stmt));
      } else if (token.type == TokenType::kBlockBegin) {
        advance();
        for (auto tag : end_tags) {
          if (is_name(tag)) return body;
        }
        body.push_back(parse_statement());
        expect_type(TokenType::kBlockEnd, "end of statement block");
      } else {
        fail("unexpected " + describe(token));
      }
    }
  }

  // Expects the block end, then the body up to one of `end_tags` (left as current token).
  StmtList parse_body(std::initializer_list<std::string_view> end_tags, bool drop_end_tag) {
    skip_op(":");
    expect_type(TokenType::kBlockEnd, "end of statement block");
    StmtList body = subparse(end_tags);
    if (drop_end_tag) advance();
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    if (current().type != TokenType::kName) fail("tag name expected");
    const std::string tag = current().text;
    const int line = current().line;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = line;
    if (tag == "if") {
      advance();
      stmt->kind = StmtKind::kIf;
      while (true) {
        ExprPtr condition = parse_tuple(/*with_condition=*/false, {}, false);
        StmtList body = parse_body({"elif", "else", "endif"}, false);
        stmt->branches.emplace_back(std::move(condition), std::move(body));
        const std::string next = advance().text;
        if (next == "elif") continue;
        if (next == "else") {
          stmt->branches.emplace_back(nullptr, parse_body({"endif"}, true));
        }
        break;
      }
    } else if (tag == "for") {
      advance();
      stmt->kind = StmtKind::kFor;
      stmt->target = parse_target({"in"});
      if (!skip_name("in")) fail("expected 'in' in for loop");
      stmt->expr = parse_tuple(/*with_condition=*/false, {"recursive"}, false);
      if (skip_name("if")) stmt->filter = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported");
      ++loop_depth_;
      stmt->body = parse_body({"endfor", "else"}, false);
      --loop_depth_;
      if (advance().text == "else") stmt->else_body = parse_body({"endfor"}, true);
    } else if (tag == "set") {
      advance();
      if (current().type == TokenType::kName && look().type == TokenType::kOperator &&
          look().text == ".") {
        stmt->target.kind = Target::Kind::kAttribute;
        stmt->target.name = advance().text;
        advance();
        stmt->target.attribute = expect_name();
      } else {
        stmt->target = parse_target({});
      }
      if (skip_op("=")) {
        stmt->kind = StmtKind::kSet;
        stmt->expr = parse_tuple(/*with_condition=*/true, {}, false);
      } else {
        stmt->kind = StmtKind::kSetBlock;
        stmt->filter = parse_filter(nullptr, false);
        stmt->body = parse_body({"endset"}, true);
      }
    } else if (tag == "macro") {
      advance();
      stmt->kind = StmtKind::kMacro;
      stmt->text = expect_name();
      parse_signature(*stmt);
      const int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      macros_.push_back(stmt.get());
      stmt->body = parse_body({"endmacro"}, true);
      macros_.pop_back();
      loop_depth_ = saved_loop_depth;
    } else if (tag == "call") {
      advance();
      stmt->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_signature(*stmt);
      stmt->expr = parse_expression(true);
      if (stmt->expr->kind != ExprKind::kCall) fail("expected a call in {% call %}");
      const int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      macros_.push_back(stmt.get());
      stmt->body = parse_body({"endcall"}, true);
      macros_.pop_back();
      loop_depth_ = saved_loop_depth;
    } else if (tag == "filter") {
      advance();
      stmt->kind = StmtKind::kFilterBlock;
      stmt->expr = parse_filter(nullptr, true);
      stmt->body = parse_body({"endfilter"}, true);
    } else if (tag == "with") {
      advance();
      stmt->kind = StmtKind::kWith;
      while (current().type != TokenType::kBlockEnd) {
        if (!stmt->assignments.empty()) expect_op(",");
        Target target = parse_target({});
        expect_op("=");
        stmt->assignments.emplace_back(std::move(target), parse_expression(true));
      }
      stmt->body = parse_body({"endwith"}, true);
    } else if (tag == "break" || tag == "continue") {
      advance();
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a for loop");
      stmt->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "generation") {
      advance();
      stmt->kind = StmtKind::kScope;
      stmt->body = parse_body({"endgeneration"}, true);
    } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
               tag == "from" || tag == "autoescape" || tag == "trans") {
      throw TemplateError(line, "unsupported tag '" + tag + "'", StatusCode::kUnsupported);
    } else {
      fail("unknown tag '" + tag + "'");
    }
    return stmt;
  }

  void parse_signature(Stmt& stmt) {
    expect_op("(");
    while (!is_op(")")) {
      if (!stmt.params.empty()) expect_op(",");
      MacroParam param;
      param.name = expect_name();
      if (skip_op("=")) {
        param.default_value = parse_expression(true);
      } else if (!stmt.params.empty() && stmt.params.back().default_value) {
        fail("non-default argument follows default argument");
      }
      stmt.params.push_back(std::move(param));
    }
    expect_op(")");
  }

  // A name or a (possibly parenthesised) tuple of targets.
  Target parse_target(std::initializer_list<std::string_view> end_names) {
    DepthGuard guard(*this);
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(end_names)) break;
      if (skip_op("(")) {
        items.push_back(parse_target({}));
        expect_op(")");
      } else {
        Target target;
        target.name = expect_name();
        items.push_back(std::move(target));
      }
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (items.empty()) fail("expected an assignment target");
      return std::move(items[0]);
    }
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.items = std::move(items);
    return tuple;
  }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<std::string_view> end_names) const {
    const auto type = current().type;
    if (type == TokenType::kVariableEnd || type == TokenType::kBlockEnd ||
        type == TokenType::kEof || is_op(")")) {
      return true;
    }
    for (auto name : end_names) {
      if (is_name(name)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool with_condition, std::initializer_list<std::string_view> end_names,
                      bool explicit_parentheses) {
    const int line = current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(end_names)) break;
      items.push_back(parse_expression(with_condition));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail("expected an expression, got " + describe(current()));
    }
    ExprPtr tuple = make(ExprKind::kTuple, line);
    tuple->children = std::move(items);
    return seal(std::move(tuple));
  }

  ExprPtr parse_expression(bool with_condition) {
    DepthGuard guard(*this);
    return with_condition ? parse_condition() : parse_or();
  }

  ExprPtr parse_condition() {
    DepthGuard guard(*this);
    const int line = current().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condition() : nullptr;
      ExprPtr node = make(ExprKind::kCondition, line);
      node->children.push_back(std::move(condition));
      node->children.push_back(std::move(expr));
      node->children.push_back(std::move(otherwise));
      expr = seal(std::move(node));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, std::string op = "") {
    ExprPtr node = make(kind, left->line);
    node->name = std::move(op);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return seal(std::move(node));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::kOr, std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::kAnd, std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const int line = advance().line;
      ExprPtr node = make(ExprKind::kNot, line);
      node->children.push_back(parse_not());
      return seal(std::move(node));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = current().line;
    ExprPtr first = parse_math1();
    ExprPtr node;
    while (true) {
      std::string op;
      if (current().type == TokenType::kOperator &&
          (current().text == "==" || current().text == "!=" || current().text == "<" ||
           current().text == "<=" || current().text == ">" || current().text == ">=")) {
        op = advance().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
        advance();
        advance();
        op = "notin";
      } else {
        break;
      }
      if (!node) {
        node = make(ExprKind::kCompare, line);
        node->children.push_back(std::move(first));
      }
      node->operators.push_back(op);
      node->children.push_back(parse_math1());
    }
    return node ? seal(std::move(node)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = advance().text;
      left = binary(ExprKind::kBinary, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary(ExprKind::kBinary, std::move(left), parse_math2(), "~");
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = advance().text;
      left = binary(ExprKind::kBinary, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (skip_op("**"))
      left = binary(ExprKind::kBinary, std::move(left), parse_unary(true), "**");
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const int line = current().line;
    ExprPtr node;
    if (skip_op("-")) {
      node = make(ExprKind::kNegate, line);
      node->children.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else if (skip_op("+")) {
      node = make(ExprKind::kPlus, line);
      node->children.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    const int line = token.line;
    ExprPtr node;
    switch (token.type) {
      case TokenType::kName:
        node = make(ExprKind::kLiteral, line);
        if (token.text == "true" || token.text == "True") {
          node->literal = Value::boolean(true);
        } else if (token.text == "false" || token.text == "False") {
          node->literal = Value::boolean(false);
        } else if (token.text == "none" || token.text == "None") {
          node->literal = Value::none();
        } else {
          node->kind = ExprKind::kName;
          node->name = token.text;
          if (!macros_.empty()) {
            Stmt& macro = *macros_.back();
            macro.uses_varargs = macro.uses_varargs || token.text == "varargs";
            macro.uses_kwargs = macro.uses_kwargs || token.text == "kwargs";
            macro.uses_caller = macro.uses_caller || token.text == "caller";
          }
        }
        advance();
        return node;
      case TokenType::kString: {
        std::string text;
        while (current().type == TokenType::kString) text += advance().text;
        node = make(ExprKind::kLiteral, line);
        node->literal = Value::string(std::move(text));
        return node;
      }
      case TokenType::kInteger:
        node = make(ExprKind::kLiteral, line);
        node->literal = Value::integer(advance().int_value);
        return node;
      case TokenType::kFloat:
        node = make(ExprKind::kLiteral, line);
        node->literal = Value::floating(advance().float_value);
        return node;
      default:
        break;
    }
    if (skip_op("(")) {
      node = parse_tuple(/*with_condition=*/true, {}, /*explicit_parentheses=*/true);
      expect_op(")");
      return node;
    }
    if (skip_op("[")) {
      node = make(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!node->children.empty()) expect_op(",");
        if (is_op("]")) break;
        node->children.push_back(parse_expression(true));
      }
      expect_op("]");
      return seal(std::move(node));
    }
    if (skip_op("{")) {
      node = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!node->children.empty()) expect_op(",");
        if (is_op("}")) break;
        node->children.push_back(parse_expression(true));
        expect_op(":");
        node->children.push_back(parse_expression(true));
      }
      expect_op("}");
      return seal(std::move(node));
    }
    fail("unexpected " + describe(token));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& token = advance();
    const int line = token.line;
    if (token.text == ".") {
      const Token& attribute = advance();
      if (attribute.type == TokenType::kName) {
        ExprPtr result = make(ExprKind::kGetAttr, line);
        result->name = attribute.text;
        result->children.push_back(std::move(node));
        return seal(std::move(result));
      }
      if (attribute.type != TokenType::kInteger) fail("expected name or number after '.'");
      ExprPtr index = make(ExprKind::kLiteral, line);
      index->literal = Value::integer(attribute.int_value);
      ExprPtr result = make(ExprKind::kGetItem, line);
      result->children.push_back(std::move(node));
      result->children.push_back(std::move(index));
      return seal(std::move(result));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr key;
    if (args.size() > 1) {
      for (const ExprPtr& arg : args) {
        if (arg->kind == ExprKind::kSlice)
          fail("slices inside a subscript tuple are not supported");
      }
    }
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      key = make(ExprKind::kTuple, line);
      key->children = std::move(args);
      key = seal(std::move(key));
    }
    if (key->kind == ExprKind::kSlice) {
      key->children[0] = std::move(node);
      return seal(std::move(key));
    }
    ExprPtr result = make(ExprKind::kGetItem, line);
    result->children.push_back(std::move(node));
    result->children.push_back(std::move(key));
    return seal(std::move(result));
  }

  // One subscript: an expression or a slice `start:stop:step`. A slice comes back as a kSlice
  // node whose first child is left empty; the caller fills in the sliced object.
  ExprPtr parse_subscribed() {
    const int line = current().line;
    ExprPtr start;
    if (!skip_op(":")) {
      start = parse_expression(true);
      if (!skip_op(":")) return start;
    }
    ExprPtr slice = make(ExprKind::kSlice, line);
    slice->children.push_back(nullptr);
    slice->children.push_back(std::move(start));
    if (is_op(":") || is_op("]") || is_op(",")) {
      slice->children.push_back(nullptr);
    } else {
      slice->children.push_back(parse_expression(true));
    }
    if (skip_op(":") && !is_op("]") && !is_op(",")) {
      slice->children.push_back(parse_expression(true));
    } else {
      slice->children.push_back(nullptr);
    }
    return slice;
  }

  void parse_call_args(Expr& node) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (current().type == TokenType::kName && look().type == TokenType::kOperator &&
          look().text == "=") {
        std::string key = advance().text;
        advance();
        node.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!node.kwargs.empty()) fail("positional argument follows keyword argument");
        node.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    ExprPtr call = make(ExprKind::kCall, current().line);
    call->children.push_back(std::move(node));
    parse_call_args(*call);
    return seal(std::move(call));
  }

  // `| name(args) | name ...`; with `start_inline` the first filter has no leading pipe.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      const int line = current().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      ExprPtr filter = make(ExprKind::kFilter, line);
      filter->name = std::move(name);
      filter->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*filter);
      node = seal(std::move(filter));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = advance().line;  // "is"
    const bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    ExprPtr test = make(ExprKind::kTest, line);
    test->name = std::move(name);
    test->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*test);
    } else {
      const auto type = current().type;
      const bool starts_argument = type == TokenType::kName || type == TokenType::kString ||
                                   type == TokenType::kInteger || type == TokenType::kFloat ||
                                   is_op("(") || is_op("[") || is_op("{");
      if (starts_argument && !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
        test->args.push_back(parse_postfix(parse_primary()));
      }
    }
    test = seal(std::move(test));
    if (!negated) return test;
    ExprPtr result = make(ExprKind::kNot, line);
    result->children.push_back(std::move(test));
    return seal(std::move(result));
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;  // macro and call-block bodies being parsed, innermost last
};

}  // namespace

StmtList JinjaParser::parse(const std::vector<Token>& tokens) {
  return ParserState(tokens).parse_template();
}

}  // namespace tachyon::jinja
