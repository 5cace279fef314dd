// jinja2's tests and global functions, Hugging Face's additions (raise_exception, strftime_now),
// and the argument binder the filters and methods share.
#include "chat/jinja_builtins.h"

#include <cmath>
#include <ctime>

#include "chat/jinja_error.h"
#include "chat/python_text.h"

#include <utf8proc.h>

namespace tachyon::jinja {
namespace {

// jinja2's sandbox refuses larger ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value function(std::string name, std::function<Value(CallArgs&)> fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = std::move(name);
  callable->invoke = std::move(fn);
  return Value::callable(std::move(callable));
}

int64_t require_int(const Value& value, std::string_view what) {
  if (!value.is_integral()) {
    raise_error("'" + python_type_name(value) + "' object cannot be interpreted as an integer (" +
                std::string(what) + ")");
  }
  return value.as_int();
}

// dict(*args, **kwargs): a mapping or a sequence of pairs, then keywords.
DictData build_dict(JinjaInterpreter& interpreter, CallArgs& args, std::string_view what) {
  DictData data;
  if (args.positional.size() > 1) {
    raise_error(std::string(what) + " expected at most 1 positional argument");
  }
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      data = source.as_dict();
    } else if (source.is_namespace()) {
      data = source.as_namespace().attributes;
    } else {
      for (const Value& pair : interpreter.iterate(source)) {
        const std::vector<Value> items = interpreter.iterate(pair);
        if (items.size() != 2) {
          raise_error(std::string(what) + ": sequence elements must have length 2");
        }
        data.set(items[0], items[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) data.set(Value::string(key), value);
  return data;
}

bool is_filter_name(std::string_view name);

}  // namespace

std::vector<std::optional<Value>> bind_arguments(std::string_view function, CallArgs& args,
                                                 std::initializer_list<std::string_view> params) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.positional.size() > params.size()) {
    raise_error(std::string(function) + "() takes at most " + std::to_string(params.size()) +
                " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    size_t index = 0;
    for (auto param : params) {
      if (param == key) break;
      ++index;
    }
    if (index == params.size()) {
      raise_error(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    }
    if (bound[index]) {
      raise_error(std::string(function) + "() got multiple values for argument '" + key + "'");
    }
    bound[index] = value;
  }
  return bound;
}

bool apply_builtin_test(JinjaInterpreter& interpreter, std::string_view name, const Value& value,
                        CallArgs& args) {
  auto one_arg = [&]() -> Value {
    auto bound = bind_arguments(name, args, {"other"});
    if (!bound[0]) raise_error("test '" + std::string(name) + "' needs an argument");
    return *bound[0];
  };
  auto no_args = [&]() { bind_arguments(name, args, {}); };
  // value < other (or <=); `swap` compares other < value for > and >=.
  auto compare = [&](bool or_equal, bool swap) {
    const Value other = one_arg();
    const Value& a = swap ? other : value;
    const Value& b = swap ? value : other;
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    bool comparable = true;
    const bool less = value_less(a, b, &comparable);
    if (!comparable) {
      raise_error("comparison not supported between instances of '" + python_type_name(a) +
                  "' and '" + python_type_name(b) + "'");
    }
    return less || (or_equal && values_equal(a, b));
  };
  if (name == "defined") return no_args(), !value.is_undefined();
  if (name == "undefined") return no_args(), value.is_undefined();
  if (name == "none") return no_args(), value.is_none();
  if (name == "boolean") return no_args(), value.is_bool();
  if (name == "true") return no_args(), value.is_bool() && value.as_bool();
  if (name == "false") return no_args(), value.is_bool() && !value.as_bool();
  if (name == "integer") return no_args(), value.is_int();
  if (name == "float") return no_args(), value.is_float();
  if (name == "number") return no_args(), value.is_number();
  if (name == "string") return no_args(), value.is_string();
  if (name == "mapping") return no_args(), value.is_dict();
  if (name == "iterable") {
    no_args();
    return value.is_undefined() || value.is_list() || value.is_dict() || value.is_string();
  }
  if (name == "sequence") {
    no_args();
    return value.is_undefined() || value.is_list() || value.is_dict() || value.is_string();
  }
  if (name == "callable") {
    no_args();
    return value.is_callable() || value.is_undefined();
  }
  if (name == "escaped") return no_args(), false;
  if (name == "odd" || name == "even") {
    no_args();
    if (value.is_undefined()) fail_undefined(value);
    if (!value.is_number()) raise_error("test '" + std::string(name) + "' needs a number");
    const Value remainder = binary_operation("%", value, Value::integer(2), interpreter);
    return values_equal(remainder, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") {
    const Value divisor = one_arg();
    if (value.is_undefined()) fail_undefined(value);
    return values_equal(binary_operation("%", value, divisor, interpreter), Value::integer(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(value, one_arg());
  if (name == "ne" || name == "!=") return !values_equal(value, one_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(false, false);
  if (name == "le" || name == "<=") return compare(true, false);
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(false, true);
  if (name == "ge" || name == ">=") return compare(true, true);
  if (name == "in") return contains(one_arg(), value);
  if (name == "sameas") {
    const Value other = one_arg();
    if (value.kind() != other.kind()) return false;
    if (value.is_none() || value.is_undefined()) return true;
    if (value.is_bool()) return value.as_bool() == other.as_bool();
    if (value.is_namespace() || value.is_callable()) return values_equal(value, other);
    raise_error("test 'sameas' is only supported for none, booleans and namespaces");
  }
  if (name == "lower" || name == "upper") {
    no_args();
    const std::string text = to_python_str(value);
    bool any_cased = false;
    for (char32_t cp : utf8_decode(text)) {
      const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      const bool upper = c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
      const bool lower = c == UTF8PROC_CATEGORY_LL;
      if ((name == "lower" && upper) || (name == "upper" && lower)) return false;
      any_cased = any_cased || upper || lower;
    }
    return any_cased;
  }
  if (name == "filter") {
    no_args();
    return value.is_string() && is_filter_name(value.as_string());
  }
  if (name == "test") {
    no_args();
    static constexpr std::string_view kTests[] = {
        "defined", "undefined", "none",   "boolean",     "true",        "false",    "integer",
        "float",   "number",    "string", "mapping",     "iterable",    "sequence", "callable",
        "escaped", "odd",       "even",   "divisibleby", "eq",          "equalto",  "ne",
        "lt",      "lessthan",  "le",     "gt",          "greaterthan", "ge",       "in",
        "sameas",  "lower",     "upper",  "filter",      "test"};
    if (!value.is_string()) return false;
    for (auto test : kTests) {
      if (test == value.as_string()) return true;
    }
    return false;
  }
  throw TemplateError(-1, "no test named '" + std::string(name) + "'", StatusCode::kUnsupported);
}

namespace {

bool is_filter_name(std::string_view name) {
  static constexpr std::string_view kFilters[] = {
      "abs",     "attr",     "batch",  "capitalize", "center",     "count",      "d",
      "default", "dictsort", "e",      "escape",     "first",      "float",      "forceescape",
      "indent",  "int",      "items",  "join",       "last",       "length",     "list",
      "lower",   "map",      "max",    "min",        "reject",     "rejectattr", "replace",
      "reverse", "round",    "safe",   "select",     "selectattr", "sort",       "string",
      "sum",     "title",    "tojson", "trim",       "unique",     "upper",      "wordcount"};
  for (auto filter : kFilters) {
    if (filter == name) return true;
  }
  return false;
}

}  // namespace

DictData make_globals(JinjaInterpreter& interpreter) {
  DictData globals;
  JinjaInterpreter* self = &interpreter;
  globals.set(
      Value::string("range"), function("range", [](CallArgs& args) {
        if (!args.keyword.empty()) raise_error("range() takes no keyword arguments");
        const auto& p = args.positional;
        if (p.empty() || p.size() > 3) {
          raise_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
        }
        int64_t start = 0;
        int64_t stop = 0;
        int64_t step = 1;
        if (p.size() == 1) {
          stop = require_int(p[0], "range");
        } else {
          start = require_int(p[0], "range");
          stop = require_int(p[1], "range");
          if (p.size() == 3) step = require_int(p[2], "range");
        }
        if (step == 0) raise_error("range() arg 3 must not be zero");
        const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                       static_cast<double>(step));
        if (count > static_cast<double>(kMaxRange)) {
          raise_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        std::vector<Value> items;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          items.push_back(Value::integer(i));
        }
        return Value::list(std::move(items));
      }));
  globals.set(Value::string("namespace"), function("namespace", [self](CallArgs& args) {
                auto ns = std::make_shared<Namespace>();
                ns->attributes = build_dict(*self, args, "namespace");
                self->track_namespace(ns);
                return Value::name_space(std::move(ns));
              }));
  globals.set(Value::string("dict"), function("dict", [self](CallArgs& args) {
                return Value::dict(build_dict(*self, args, "dict"));
              }));
  globals.set(Value::string("raise_exception"),
              function("raise_exception", [](CallArgs& args) -> Value {
                auto bound = bind_arguments("raise_exception", args, {"message"});
                raise_error(bound[0] ? to_python_str(*bound[0]) : "raise_exception called");
              }));
  globals.set(Value::string("strftime_now"), function("strftime_now", [](CallArgs& args) {
                auto bound = bind_arguments("strftime_now", args, {"format"});
                if (!bound[0] || !bound[0]->is_string()) {
                  raise_error("strftime_now() needs a format string");
                }
                const std::time_t now = std::time(nullptr);
                std::tm local{};
                localtime_r(&now, &local);
                char buffer[512];
                const size_t n =
                    std::strftime(buffer, sizeof(buffer), bound[0]->as_string().c_str(), &local);
                return Value::string(std::string(buffer, n));
              }));
  globals.set(Value::string("joiner"), function("joiner", [](CallArgs& args) {
                auto bound = bind_arguments("joiner", args, {"sep"});
                const std::string separator =
                    bound[0] ? to_python_str(*bound[0]) : std::string(", ");
                auto used = std::make_shared<bool>(false);
                return function("joiner", [separator, used](CallArgs&) {
                  if (!*used) {
                    *used = true;
                    return Value::string("");
                  }
                  return Value::string(separator);
                });
              }));
  return globals;
}

}  // namespace tachyon::jinja
