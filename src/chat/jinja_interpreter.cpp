#include "chat/jinja_interpreter.h"

#include <cmath>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/python_text.h"

namespace tachyon::jinja {

void raise_error(std::string message) {
  throw TemplateError(-1, std::move(message));
}

void fail_undefined(const Value& value) {
  const std::string& hint = value.undefined_hint();
  raise_error(hint.empty() ? "value is undefined" : hint);
}

namespace {

// Fills in the node's line on errors raised by code that did not know it.
[[noreturn]] void rethrow_with_line(const TemplateError& error, int line) {
  if (error.line() >= 0) throw error;
  throw TemplateError(line, error.message(), error.code());
}

std::string operand_error(std::string_view op, const Value& left, const Value& right) {
  return "unsupported operand type(s) for " + std::string(op) + ": '" + python_type_name(left) +
         "' and '" + python_type_name(right) + "'";
}

void check_overflow(bool overflow) {
  if (overflow) raise_error("integer overflow (tachyon integers are 64-bit)");
}

// Python's float floor division and modulo.
void float_divmod(double x, double y, double* floor_div, double* mod) {
  double m = std::fmod(x, y);
  double div = (x - m) / y;
  if (m != 0.0) {
    if ((y < 0) != (m < 0)) {
      m += y;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, y);
  }
  double result = 0.0;
  if (div != 0.0) {
    result = std::floor(div);
    if (div - result > 0.5) result += 1.0;
  } else {
    result = std::copysign(0.0, x / y);
  }
  *floor_div = result;
  *mod = m;
}

Value repeat(const Value& sequence, int64_t count, const JinjaInterpreter& interpreter) {
  if (count <= 0) {
    return sequence.is_string() ? Value::string("") : Value::list({}, sequence.is_tuple());
  }
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    interpreter.check_size(text.size() * static_cast<size_t>(std::min<int64_t>(count, 1 << 30)));
    std::string out;
    out.reserve(text.size() * static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out += text;
    return Value::string(std::move(out));
  }
  const auto& items = sequence.as_list();
  interpreter.check_size(items.size() * static_cast<size_t>(std::min<int64_t>(count, 1 << 30)));
  std::vector<Value> out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), sequence.is_tuple());
}

}  // namespace

Value binary_operation(std::string_view op, const Value& left, const Value& right,
                       const JinjaInterpreter& interpreter) {
  if (op == "~") {
    std::string text = to_python_str(left);
    text += to_python_str(right);
    interpreter.check_size(text.size());
    return Value::string(std::move(text));
  }
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  const bool numbers = left.is_number() && right.is_number();
  const bool integers = left.is_integral() && right.is_integral();
  if (op == "+") {
    if (integers) {
      int64_t result = 0;
      check_overflow(__builtin_add_overflow(left.as_int(), right.as_int(), &result));
      return Value::integer(result);
    }
    if (numbers) return Value::floating(left.as_double() + right.as_double());
    if (left.is_string() && right.is_string()) {
      interpreter.check_size(left.as_string().size() + right.as_string().size());
      return Value::string(left.as_string() + right.as_string());
    }
    if (left.is_list() && right.is_list() && left.is_tuple() == right.is_tuple()) {
      std::vector<Value> items = left.as_list();
      items.insert(items.end(), right.as_list().begin(), right.as_list().end());
      return Value::list(std::move(items), left.is_tuple());
    }
    if (left.is_list() && right.is_list()) {
      raise_error("can only concatenate " + python_type_name(left) + " (not \"" +
                  python_type_name(right) + "\") to " + python_type_name(left));
    }
    if (left.is_string()) {
      raise_error("can only concatenate str (not \"" + python_type_name(right) + "\") to str");
    }
    raise_error(operand_error(op, left, right));
  }
  if (op == "-") {
    if (integers) {
      int64_t result = 0;
      check_overflow(__builtin_sub_overflow(left.as_int(), right.as_int(), &result));
      return Value::integer(result);
    }
    if (numbers) return Value::floating(left.as_double() - right.as_double());
    raise_error(operand_error(op, left, right));
  }
  if (op == "*") {
    if (integers) {
      int64_t result = 0;
      check_overflow(__builtin_mul_overflow(left.as_int(), right.as_int(), &result));
      return Value::integer(result);
    }
    if (numbers) return Value::floating(left.as_double() * right.as_double());
    if ((left.is_string() || left.is_list()) && right.is_integral()) {
      return repeat(left, right.as_int(), interpreter);
    }
    if (left.is_integral() && (right.is_string() || right.is_list())) {
      return repeat(right, left.as_int(), interpreter);
    }
    raise_error(operand_error(op, left, right));
  }
  if (!numbers) {
    if (op == "%" && left.is_string()) {
      raise_error("printf-style string formatting ('%' on a string) is not supported");
    }
    raise_error(operand_error(op, left, right));
  }
  if (op == "/") {
    if (right.as_double() == 0.0) raise_error("division by zero");
    return Value::floating(left.as_double() / right.as_double());
  }
  if (op == "//" || op == "%") {
    if (integers) {
      const int64_t a = left.as_int();
      const int64_t b = right.as_int();
      if (b == 0) raise_error("integer division or modulo by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1) {
        if (op == "%") return Value::integer(0);
        check_overflow(true);
      }
      int64_t quotient = a / b;
      int64_t remainder = a % b;
      if (remainder != 0 && ((remainder < 0) != (b < 0))) {
        quotient -= 1;
        remainder += b;
      }
      return Value::integer(op == "//" ? quotient : remainder);
    }
    if (right.as_double() == 0.0) raise_error("float division or modulo by zero");
    double floor_div = 0.0;
    double mod = 0.0;
    float_divmod(left.as_double(), right.as_double(), &floor_div, &mod);
    return Value::floating(op == "//" ? floor_div : mod);
  }
  if (op == "**") {
    if (integers && right.as_int() >= 0) {
      int64_t base = left.as_int();
      int64_t exponent = right.as_int();
      int64_t result = 1;
      while (exponent > 0) {
        if (exponent & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
        exponent >>= 1;
        if (exponent > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value::integer(result);
    }
    if (left.as_double() == 0.0 && right.as_double() < 0) {
      raise_error("0.0 cannot be raised to a negative power");
    }
    const double result = std::pow(left.as_double(), right.as_double());
    if (std::isnan(result) && !std::isnan(left.as_double()) && !std::isnan(right.as_double())) {
      raise_error("negative number cannot be raised to a fractional power");
    }
    return Value::floating(result);
  }
  raise_error("unknown operator '" + std::string(op) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        raise_error("'in <string>' requires string as left operand, not " + python_type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& element : container.as_list()) {
        if (values_equal(element, item)) return true;
      }
      return false;
    case ValueKind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      raise_error("argument of type '" + python_type_name(container) + "' is not iterable");
  }
}

const Value* JinjaInterpreter::Scope::find(std::string_view name) const {
  for (const auto& [key, value] : variables) {
    if (key == name) return &value;
  }
  return nullptr;
}

void JinjaInterpreter::Scope::set(std::string_view name, Value value) {
  for (auto& [key, existing] : variables) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  variables.emplace_back(std::string(name), std::move(value));
}

JinjaInterpreter::JinjaInterpreter(const RenderLimits& limits, DictData context)
    : limits_(limits), context_(std::move(context)) {
  globals_ = make_globals(*this);
}

JinjaInterpreter::~JinjaInterpreter() {
  std::vector<std::pair<Value, Value>> released;
  for (const auto& ns : namespaces_) {
    for (auto& item : ns->attributes.items) released.push_back(std::move(item));
    ns->attributes.items.clear();
  }
}

void JinjaInterpreter::check_size(size_t num_bytes) const {
  if (num_bytes > limits_.max_output_bytes) {
    throw TemplateError(
        -1, "rendered text would exceed " + std::to_string(limits_.max_output_bytes) + " bytes",
        StatusCode::kOutOfRange);
  }
}

void JinjaInterpreter::count_steps(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    throw TemplateError(-1,
                        "template ran more than " + std::to_string(limits_.max_steps) +
                            " steps (loop iterations, statements and calls)",
                        StatusCode::kOutOfRange);
  }
}

std::string JinjaInterpreter::render(const StmtList& body) {
  std::string out;
  out_ = &out;
  Scope* root = new_scope(nullptr);
  execute(body, root);
  out_ = nullptr;
  return out;
}

JinjaInterpreter::Scope* JinjaInterpreter::new_scope(Scope* parent) {
  Scope& scope = scopes_.emplace_back();
  scope.parent = parent;
  return &scope;
}

Value JinjaInterpreter::lookup(std::string_view name, const Scope* scope) const {
  for (const Scope* s = scope; s != nullptr; s = s->parent) {
    if (const Value* value = s->find(name)) return *value;
  }
  if (const Value* value = context_.find(name)) return *value;
  if (const Value* value = globals_.find(name)) return *value;
  return Value::undefined("'" + std::string(name) + "' is undefined");
}

void JinjaInterpreter::write(std::string_view text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

std::string JinjaInterpreter::capture(const StmtList& body, Scope* scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    execute(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

JinjaInterpreter::Flow JinjaInterpreter::execute(const StmtList& body, Scope* scope) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = execute(*stmt, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

JinjaInterpreter::Flow JinjaInterpreter::execute(const Stmt& stmt, Scope* scope) {
  if (++depth_ > limits_.max_depth) {
    --depth_;
    throw TemplateError(stmt.line, "template nesting is too deep", StatusCode::kOutOfRange);
  }
  struct DepthRestore {
    int& depth;
    ~DepthRestore() { --depth; }
  } restore{depth_};
  try {
    count_steps(1);
    switch (stmt.kind) {
      case StmtKind::kText:
        write(stmt.text);
        return Flow::kNormal;
      case StmtKind::kOutput: {
        const Value value = eval(*stmt.expr, scope);
        if (value.is_string()) {
          write(value.as_string());
        } else {
          write(to_python_str(value));
        }
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (const auto& [condition, body] : stmt.branches) {
          if (!condition || eval(*condition, scope).truthy()) return execute(body, scope);
        }
        return Flow::kNormal;
      case StmtKind::kFor:
        return execute_for(stmt, scope);
      case StmtKind::kSet:
      case StmtKind::kSetBlock:
        execute_set(stmt, scope);
        return Flow::kNormal;
      case StmtKind::kMacro:
        scope->captured = true;
        scope->set(stmt.text, make_macro(stmt, scope, &stmt.body, stmt.text));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        scope->captured = true;
        const Expr& call_expr = *stmt.expr;
        const Value callee = eval(*call_expr.children[0], scope);
        CallArgs args = eval_args(call_expr, scope);
        args.keyword.emplace_back("caller", make_macro(stmt, scope, &stmt.body, "caller"));
        const Value result = call(callee, args);
        write(to_python_str(result));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        Scope* inner = new_scope(scope);
        Value text = Value::string(capture(stmt.body, inner));
        // The filter chain was parsed with a null innermost input; apply it from the inside out.
        std::vector<const Expr*> chain;
        for (const Expr* e = stmt.expr.get(); e != nullptr; e = e->children[0].get()) {
          chain.push_back(e);
        }
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args = eval_args(**it, scope);
          try {
            text = apply_filter((*it)->name, text, args);
          } catch (const TemplateError& error) {
            rethrow_with_line(error, (*it)->line);
          }
        }
        write(to_python_str(text));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        Scope* inner = new_scope(scope);
        std::vector<Value> values;
        for (const auto& [target, expr] : stmt.assignments) values.push_back(eval(*expr, scope));
        for (size_t i = 0; i < values.size(); ++i) {
          assign(stmt.assignments[i].first, values[i], inner, stmt.line);
        }
        return execute(stmt.body, inner);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return execute(stmt.body, scope);
    }
  } catch (const TemplateError& error) {
    rethrow_with_line(error, stmt.line);
  }
  return Flow::kNormal;
}

JinjaInterpreter::Flow JinjaInterpreter::execute_for(const Stmt& stmt, Scope* scope) {
  const Value iterable = eval(*stmt.expr, scope);
  if (iterable.is_none() || iterable.is_number() || iterable.is_callable() ||
      iterable.is_namespace() || iterable.is_loop()) {
    raise_error("'" + python_type_name(iterable) + "' object is not iterable");
  }
  std::vector<Value> items = iterate(iterable);
  if (stmt.filter) {
    std::vector<Value> kept;
    Scope* filter_scope = new_scope(scope);
    for (Value& item : items) {
      count_steps(1);
      filter_scope->variables.clear();
      assign(stmt.target, item, filter_scope, stmt.line);
      if (eval(*stmt.filter, filter_scope).truthy()) kept.push_back(std::move(item));
      if (filter_scope->captured) filter_scope = new_scope(scope);
    }
    items = std::move(kept);
  }
  // The else body runs in the enclosing scope, so break/continue there reach an outer loop.
  if (items.empty()) return execute(stmt.else_body, scope);
  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  auto last_changed = std::make_shared<Value>();
  // loop.depth only grows in recursive loops, which are not supported.
  const int depth0 = 0;
  Scope* iteration = new_scope(scope);
  for (size_t i = 0; i < shared_items->size(); ++i) {
    count_steps(1);
    if (iteration->captured) {
      iteration = new_scope(scope);
    } else {
      iteration->variables.clear();
    }
    auto state = std::make_shared<LoopState>();
    state->items = shared_items;
    state->index0 = i;
    state->depth0 = depth0;
    state->last_changed = last_changed;
    iteration->set("loop", Value::loop(std::move(state)));
    assign(stmt.target, (*shared_items)[i], iteration, stmt.line);
    if (execute(stmt.body, iteration) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void JinjaInterpreter::assign(const Target& target, const Value& value, Scope* scope, int line) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope->set(target.name, value);
      return;
    case Target::Kind::kTuple: {
      if (value.is_undefined()) fail_undefined(value);
      if (!value.is_list() && !value.is_string() && !value.is_dict()) {
        raise_error("cannot unpack non-iterable " + python_type_name(value) + " object");
      }
      const std::vector<Value> items = iterate(value);
      if (items.size() != target.items.size()) {
        raise_error(items.size() < target.items.size()
                        ? "not enough values to unpack (expected " +
                              std::to_string(target.items.size()) + ", got " +
                              std::to_string(items.size()) + ")"
                        : "too many values to unpack (expected " +
                              std::to_string(target.items.size()) + ")");
      }
      for (size_t i = 0; i < items.size(); ++i) assign(target.items[i], items[i], scope, line);
      return;
    }
    case Target::Kind::kAttribute: {
      const Value object = lookup(target.name, scope);
      if (!object.is_namespace()) {
        raise_error("cannot assign attribute on non-namespace object '" + target.name + "'");
      }
      object.as_namespace().attributes.set(Value::string(target.attribute), value);
      return;
    }
  }
}

void JinjaInterpreter::execute_set(const Stmt& stmt, Scope* scope) {
  Value value;
  if (stmt.kind == StmtKind::kSet) {
    value = eval(*stmt.expr, scope);
  } else {
    Scope* inner = new_scope(scope);
    value = Value::string(capture(stmt.body, inner));
    std::vector<const Expr*> chain;
    for (const Expr* e = stmt.filter.get(); e != nullptr; e = e->children[0].get()) {
      chain.push_back(e);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      CallArgs args = eval_args(**it, scope);
      try {
        value = apply_filter((*it)->name, value, args);
      } catch (const TemplateError& error) {
        rethrow_with_line(error, (*it)->line);
      }
    }
  }
  assign(stmt.target, value, scope, stmt.line);
}

Value JinjaInterpreter::make_macro(const Stmt& stmt, Scope* scope, const StmtList* body,
                                   std::string name) {
  auto callable = std::make_shared<Callable>();
  callable->name = name;
  const Stmt* definition = &stmt;
  callable->invoke = [this, definition, scope, body, name](CallArgs& args) -> Value {
    if (macro_depth_ >= limits_.max_macro_depth) {
      throw TemplateError(
          -1, "macro calls nested deeper than " + std::to_string(limits_.max_macro_depth),
          StatusCode::kOutOfRange);
    }
    count_steps(1);
    Scope* call_scope = new_scope(scope);
    const auto& params = definition->params;
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        call_scope->set(params[i].name, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    if (!varargs.empty() && !definition->uses_varargs) {
      raise_error("macro '" + name + "' takes not more than " + std::to_string(params.size()) +
                  " argument(s)");
    }
    DictData kwargs;
    for (auto& [key, value] : args.keyword) {
      bool is_param = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != key) continue;
        if (i < args.positional.size()) {
          raise_error("macro '" + name + "' got multiple values for argument '" + key + "'");
        }
        is_param = true;
      }
      if (key == "caller" && !is_param && !definition->uses_caller) {
        raise_error("macro '" + name + "' was invoked with 'caller' but does not use it");
      }
      if (is_param || key == "caller") {
        call_scope->set(key, value);
      } else if (definition->uses_kwargs) {
        kwargs.set(Value::string(key), value);
      } else {
        raise_error("macro '" + name + "' takes no keyword argument '" + key + "'");
      }
    }
    for (const MacroParam& param : params) {
      if (call_scope->find(param.name)) continue;
      call_scope->set(param.name,
                      param.default_value
                          ? eval(*param.default_value, call_scope)
                          : Value::undefined("parameter '" + param.name + "' was not provided"));
    }
    call_scope->set("varargs", Value::list(std::move(varargs), /*is_tuple=*/true));
    call_scope->set("kwargs", Value::dict(std::move(kwargs)));
    ++macro_depth_;
    std::string text;
    try {
      text = capture(*body, call_scope);
    } catch (...) {
      --macro_depth_;
      throw;
    }
    --macro_depth_;
    return Value::string(std::move(text));
  };
  return Value::callable(std::move(callable));
}

std::vector<Value> JinjaInterpreter::iterate(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return {};
    case ValueKind::kList:
      return value.as_list();
    case ValueKind::kDict: {
      std::vector<Value> keys;
      for (const auto& [key, item] : value.as_dict().items) keys.push_back(key);
      return keys;
    }
    case ValueKind::kString: {
      std::vector<Value> chars;
      const std::string& text = value.as_string();
      size_t i = 0;
      while (i < text.size()) {
        size_t length = 1;
        while (i + length < text.size() &&
               (static_cast<unsigned char>(text[i + length]) & 0xC0) == 0x80) {
          ++length;
        }
        chars.push_back(Value::string(text.substr(i, length)));
        i += length;
      }
      return chars;
    }
    default:
      raise_error("'" + python_type_name(value) + "' object is not iterable");
  }
}

}  // namespace tachyon::jinja
