// JinjaInterpreter's expression half: evaluation, attribute and item access, calls.
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"
#include "chat/python_text.h"

namespace tachyon::jinja {
namespace {

std::string missing_attribute_hint(const Value& object, std::string_view name) {
  if (object.is_none()) return "'None' has no attribute '" + std::string(name) + "'";
  return "'" + python_type_name(object) + " object' has no attribute '" + std::string(name) + "'";
}

bool is_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::optional<int64_t> slice_bound(const Value& value, bool* valid) {
  if (value.is_none() || value.is_undefined()) {
    if (value.is_undefined()) *valid = false;
    return std::nullopt;
  }
  if (value.is_integral()) return value.as_int();
  *valid = false;
  return std::nullopt;
}

Value loop_attribute(const LoopState& loop, std::string_view name) {
  const auto& items = *loop.items;
  const int64_t length = static_cast<int64_t>(items.size());
  const int64_t index0 = static_cast<int64_t>(loop.index0);
  if (name == "index") return Value::integer(index0 + 1);
  if (name == "index0") return Value::integer(index0);
  if (name == "revindex") return Value::integer(length - index0);
  if (name == "revindex0") return Value::integer(length - index0 - 1);
  if (name == "first") return Value::boolean(index0 == 0);
  if (name == "last") return Value::boolean(index0 == length - 1);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(loop.depth0 + 1);
  if (name == "depth0") return Value::integer(loop.depth0);
  if (name == "previtem") {
    return index0 > 0 ? items[loop.index0 - 1] : Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return index0 + 1 < length ? items[loop.index0 + 1] : Value::undefined("there is no next item");
  }
  if (name == "cycle") {
    auto callable = std::make_shared<Callable>();
    callable->name = "cycle";
    const size_t index = loop.index0;
    callable->invoke = [index](CallArgs& args) -> Value {
      if (args.positional.empty()) raise_error("no items for cycling given");
      return args.positional[index % args.positional.size()];
    };
    return Value::callable(std::move(callable));
  }
  if (name == "changed") {
    auto callable = std::make_shared<Callable>();
    callable->name = "changed";
    auto memory = loop.last_changed;
    callable->invoke = [memory](CallArgs& args) -> Value {
      Value current = Value::list(args.positional);
      if (!memory->is_undefined() && values_equal(*memory, current)) return Value::boolean(false);
      *memory = std::move(current);
      return Value::boolean(true);
    };
    return Value::callable(std::move(callable));
  }
  return Value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

}  // namespace

Value JinjaInterpreter::get_attribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case ValueKind::kUndefined:
      fail_undefined(object);
    case ValueKind::kDict: {
      if (auto method = find_method(*this, object, name)) return *method;
      if (const Value* value = object.as_dict().find(name)) return *value;
      break;
    }
    case ValueKind::kNamespace:
      if (const Value* value = object.as_namespace().attributes.find(name)) return *value;
      break;
    case ValueKind::kLoop:
      return loop_attribute(object.as_loop(), name);
    default:
      if (auto method = find_method(*this, object, name)) return *method;
      break;
  }
  return Value::undefined(missing_attribute_hint(object, name));
}

Value JinjaInterpreter::get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case ValueKind::kUndefined:
      fail_undefined(object);
    case ValueKind::kDict:
      if (const Value* value = object.as_dict().find(key)) return *value;
      break;
    case ValueKind::kList:
      if (key.is_integral()) {
        const auto& items = object.as_list();
        int64_t index = key.as_int();
        if (index < 0) index += static_cast<int64_t>(items.size());
        if (index >= 0 && index < static_cast<int64_t>(items.size())) {
          return items[static_cast<size_t>(index)];
        }
        return Value::undefined(python_type_name(object) + " index out of range");
      }
      break;
    case ValueKind::kString:
      if (key.is_integral()) {
        const std::string& text = object.as_string();
        int64_t index = key.as_int();
        if (is_ascii(text)) {
          if (index < 0) index += static_cast<int64_t>(text.size());
          if (index >= 0 && index < static_cast<int64_t>(text.size())) {
            return Value::string(std::string(1, text[static_cast<size_t>(index)]));
          }
        } else {
          const std::u32string code_points = utf8_decode(text);
          if (index < 0) index += static_cast<int64_t>(code_points.size());
          if (index >= 0 && index < static_cast<int64_t>(code_points.size())) {
            std::string out;
            utf8_append(code_points[static_cast<size_t>(index)], out);
            return Value::string(std::move(out));
          }
        }
        return Value::undefined("string index out of range");
      }
      break;
    case ValueKind::kNamespace:
    case ValueKind::kLoop:
      if (key.is_string()) return get_attribute(object, key.as_string());
      break;
    default:
      break;
  }
  // jinja2 falls back to attribute lookup for string keys (so d['items'] finds the method).
  if (key.is_string()) {
    if (auto method = find_method(*this, object, key.as_string())) return *method;
    return Value::undefined(missing_attribute_hint(object, key.as_string()));
  }
  return Value::undefined("'" + python_type_name(object) + " object' has no element " +
                          to_python_repr(key));
}

Value JinjaInterpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) {
    raise_error("'" + python_type_name(callee) + "' object is not callable");
  }
  return callee.as_callable().invoke(args);
}

Value JinjaInterpreter::apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  return apply_builtin_filter(*this, name, input, args);
}

bool JinjaInterpreter::apply_test(std::string_view name, const Value& input, CallArgs& args) {
  return apply_builtin_test(*this, name, input, args);
}

CallArgs JinjaInterpreter::eval_args(const Expr& expr, Scope* scope) {
  CallArgs args;
  args.positional.reserve(expr.args.size());
  for (const ExprPtr& arg : expr.args) args.positional.push_back(eval(*arg, scope));
  for (const auto& [key, arg] : expr.kwargs) args.keyword.emplace_back(key, eval(*arg, scope));
  return args;
}

Value JinjaInterpreter::eval(const Expr& expr, Scope* scope) {
  if (++depth_ > limits_.max_depth) {
    --depth_;
    throw TemplateError(expr.line, "expression nesting is too deep", StatusCode::kOutOfRange);
  }
  try {
    Value result = eval_inner(expr, scope);
    --depth_;
    return result;
  } catch (const TemplateError& error) {
    --depth_;
    if (error.line() >= 0) throw;
    throw TemplateError(expr.line, error.message(), error.code());
  }
}

Value JinjaInterpreter::eval_slice(const Expr& expr, Scope* scope) {
  const Value object = eval(*expr.children[0], scope);
  if (object.is_undefined()) fail_undefined(object);
  bool valid = true;
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (expr.children[static_cast<size_t>(i) + 1]) {
      bounds[i] = slice_bound(eval(*expr.children[static_cast<size_t>(i) + 1], scope), &valid);
    }
  }
  if (!valid || !(object.is_list() || object.is_string())) {
    return Value::undefined("'" + python_type_name(object) + " object' cannot be sliced");
  }
  std::vector<int64_t> indices;
  if (object.is_list()) {
    const auto& items = object.as_list();
    if (!python_slice_indices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], bounds[2],
                              indices)) {
      raise_error("slice step cannot be zero");
    }
    std::vector<Value> out;
    out.reserve(indices.size());
    for (int64_t i : indices) out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), object.is_tuple());
  }
  const std::string& text = object.as_string();
  const bool ascii = is_ascii(text);
  const std::u32string code_points = ascii ? std::u32string() : utf8_decode(text);
  const int64_t length = static_cast<int64_t>(ascii ? text.size() : code_points.size());
  if (!python_slice_indices(length, bounds[0], bounds[1], bounds[2], indices)) {
    raise_error("slice step cannot be zero");
  }
  std::string out;
  out.reserve(indices.size());
  for (int64_t i : indices) {
    if (ascii) {
      out.push_back(text[static_cast<size_t>(i)]);
    } else {
      utf8_append(code_points[static_cast<size_t>(i)], out);
    }
  }
  return Value::string(std::move(out));
}

Value JinjaInterpreter::eval_compare(const Expr& expr, Scope* scope) {
  Value left = eval(*expr.children[0], scope);
  for (size_t i = 0; i < expr.operators.size(); ++i) {
    Value right = eval(*expr.children[i + 1], scope);
    const std::string& op = expr.operators[i];
    bool result = false;
    if (op == "==") {
      result = values_equal(left, right);
    } else if (op == "!=") {
      result = !values_equal(left, right);
    } else if (op == "in") {
      result = contains(right, left);
    } else if (op == "notin") {
      result = !contains(right, left);
    } else {
      if (left.is_undefined()) fail_undefined(left);
      if (right.is_undefined()) fail_undefined(right);
      bool comparable = true;
      if (op == "<") {
        result = value_less(left, right, &comparable);
      } else if (op == ">") {
        result = value_less(right, left, &comparable);
      } else if (op == "<=") {
        result = !value_less(right, left, &comparable);
      } else {
        result = !value_less(left, right, &comparable);
      }
      if (!comparable) {
        raise_error("'" + op + "' not supported between instances of '" + python_type_name(left) +
                    "' and '" + python_type_name(right) + "'");
      }
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value JinjaInterpreter::eval_inner(const Expr& expr, Scope* scope) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName:
      return lookup(expr.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const ExprPtr& child : expr.children) items.push_back(eval(*child, scope));
      return Value::list(std::move(items), expr.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto data = std::make_shared<DictData>();
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        Value key = eval(*expr.children[i], scope);
        if (key.is_list() && !key.is_tuple()) raise_error("unhashable type: 'list'");
        if (key.is_dict()) raise_error("unhashable type: 'dict'");
        data->set(std::move(key), eval(*expr.children[i + 1], scope));
      }
      return Value::dict(std::move(data));
    }
    case ExprKind::kGetAttr:
      return get_attribute(eval(*expr.children[0], scope), expr.name);
    case ExprKind::kGetItem: {
      const Value object = eval(*expr.children[0], scope);
      return get_item(object, eval(*expr.children[1], scope));
    }
    case ExprKind::kSlice:
      return eval_slice(expr, scope);
    case ExprKind::kCall: {
      const Value callee = eval(*expr.children[0], scope);
      CallArgs args = eval_args(expr, scope);
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      const Value input = eval(*expr.children[0], scope);
      CallArgs args = eval_args(expr, scope);
      return apply_filter(expr.name, input, args);
    }
    case ExprKind::kTest: {
      const Value input = eval(*expr.children[0], scope);
      CallArgs args = eval_args(expr, scope);
      return Value::boolean(apply_test(expr.name, input, args));
    }
    case ExprKind::kNegate:
    case ExprKind::kPlus: {
      const Value operand = eval(*expr.children[0], scope);
      if (operand.is_undefined()) fail_undefined(operand);
      const bool negate = expr.kind == ExprKind::kNegate;
      if (operand.is_integral()) {
        const int64_t value = operand.as_int();
        if (!negate) return Value::integer(value);
        if (value == std::numeric_limits<int64_t>::min()) raise_error("integer overflow");
        return Value::integer(-value);
      }
      if (operand.is_float()) {
        return Value::floating(negate ? -operand.as_double() : operand.as_double());
      }
      raise_error(std::string("bad operand type for unary ") + (negate ? "-" : "+") + ": '" +
                  python_type_name(operand) + "'");
    }
    case ExprKind::kNot:
      return Value::boolean(!eval(*expr.children[0], scope).truthy());
    case ExprKind::kBinary: {
      const Value left = eval(*expr.children[0], scope);
      const Value right = eval(*expr.children[1], scope);
      return binary_operation(expr.name, left, right, *this);
    }
    case ExprKind::kAnd: {
      Value left = eval(*expr.children[0], scope);
      if (!left.truthy()) return left;
      return eval(*expr.children[1], scope);
    }
    case ExprKind::kOr: {
      Value left = eval(*expr.children[0], scope);
      if (left.truthy()) return left;
      return eval(*expr.children[1], scope);
    }
    case ExprKind::kCompare:
      return eval_compare(expr, scope);
    case ExprKind::kCondition:
      if (eval(*expr.children[0], scope).truthy()) return eval(*expr.children[1], scope);
      if (expr.children[2]) return eval(*expr.children[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined.");
  }
  raise_error("unknown expression");
}

}  // namespace tachyon::jinja
