// Python methods templates call on values: str.strip, str.split, dict.items, list.index, ...
// Mutating methods are refused the way Hugging Face's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>

#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/python_text.h"

#include <utf8proc.h>

namespace tachyon::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

Value bound(std::string name, std::function<Value(CallArgs&)> fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = std::move(name);
  callable->invoke = std::move(fn);
  return Value::callable(std::move(callable));
}

Value unsafe(const Value& object, std::string_view name) {
  return Value::undefined("access to attribute '" + std::string(name) + "' of '" +
                          python_type_name(object) + "' object is unsafe.");
}

const std::string& require_string(const std::optional<Value>& value, std::string_view what) {
  if (!value || !value->is_string()) {
    raise_error(std::string(what) + " must be str, not " +
                (value ? python_type_name(*value) : std::string("nothing")));
  }
  return value->as_string();
}

std::optional<std::string> optional_string(const std::optional<Value>& value,
                                           std::string_view what) {
  if (!value || value->is_none()) return std::nullopt;
  return require_string(value, what);
}

int64_t optional_int(const std::optional<Value>& value, int64_t default_value,
                     std::string_view what) {
  if (!value || value->is_none()) return default_value;
  if (!value->is_integral()) {
    raise_error(std::string(what) + " must be an integer, not " + python_type_name(*value));
  }
  return value->as_int();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.push_back(Value::string(std::move(part)));
  return Value::list(std::move(items));
}

// Code-point index of a byte offset (Python's str.find answers in characters).
int64_t char_index(const std::string& text, size_t byte_offset) {
  return static_cast<int64_t>(utf8_length(std::string_view(text).substr(0, byte_offset)));
}

template <typename Predicate>
bool all_code_points(const std::string& text, Predicate predicate) {
  if (text.empty()) return false;
  for (char32_t cp : utf8_decode(text)) {
    if (!predicate(cp)) return false;
  }
  return true;
}

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_letter(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
bool is_decimal(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_ND;
}

// str.isupper / str.islower: at least one cased character and none of the other case.
bool has_case(const std::string& text, bool upper) {
  bool any_cased = false;
  for (char32_t cp : utf8_decode(text)) {
    const auto c = category(cp);
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) {
      if (!upper) return false;
      any_cased = true;
    } else if (c == UTF8PROC_CATEGORY_LL) {
      if (upper) return false;
      any_cased = true;
    }
  }
  return any_cased;
}

// str.format through jinja2's sandboxed formatter: {} {0} {name} with str() conversion.
std::string python_format(const std::string& format, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) raise_error("Single '{' encountered in format string");
    const std::string field = format.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      raise_error("str.format: format specs and conversions are not supported ('{" + field + "}')");
    }
    const Value* value = nullptr;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) raise_error("Replacement index out of range");
      value = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = std::stoul(field);
      if (index >= args.positional.size()) raise_error("Replacement index out of range");
      value = &args.positional[index];
    } else {
      for (const auto& [key, item] : args.keyword) {
        if (key == field) value = &item;
      }
      if (!value) raise_error("KeyError: '" + field + "'");
    }
    out += to_python_str(*value);
    i = close;
  }
  return out;
}

std::optional<Value> string_method(JinjaInterpreter& interpreter, const Value& object,
                                   std::string_view name) {
  const std::string method(name);
  // Methods capture the value (a shared string), not a copy of its text.
  auto make = [&](std::function<Value(const std::string&, CallArgs&)> fn) {
    return bound(method, [object, fn = std::move(fn)](CallArgs& call) {
      return fn(object.as_string(), call);
    });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    return make([left, right, method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"chars"});
      return Value::string(python_strip(text, optional_string(a[0], "chars"), left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return make([from_right, method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"sep", "maxsplit"});
      const auto separator = optional_string(a[0], "sep");
      if (separator && separator->empty()) raise_error("empty separator");
      return string_list(
          python_split(text, separator, optional_int(a[1], -1, "maxsplit"), from_right));
    });
  }
  if (name == "splitlines") {
    return make([method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"keepends"});
      if (a[0] && a[0]->truthy()) raise_error("splitlines(keepends=True) is not supported");
      return string_list(python_splitlines(text));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool at_start = name == "startswith";
    return make([at_start, method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"prefix", "start", "end"});
      if (a[1] || a[2]) raise_error(method + " with start/end arguments is not supported");
      std::vector<Value> candidates;
      if (a[0] && a[0]->is_tuple()) {
        candidates = a[0]->as_list();
      } else {
        candidates.push_back(a[0].value_or(Value::none()));
      }
      for (const Value& candidate : candidates) {
        if (!candidate.is_string()) {
          raise_error(method + " first arg must be str or a tuple of str, not " +
                      python_type_name(candidate));
        }
        const std::string& affix = candidate.as_string();
        if (affix.size() > text.size()) continue;
        if (at_start ? text.compare(0, affix.size(), affix) == 0
                     : text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
          return Value::boolean(true);
        }
      }
      return Value::boolean(false);
    });
  }
  if (name == "replace") {
    return make([method, &interpreter](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"old", "new", "count"});
      std::string result =
          python_replace(text, require_string(a[0], "old"), require_string(a[1], "new"),
                         optional_int(a[2], -1, "count"));
      interpreter.check_size(result.size());
      return Value::string(std::move(result));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "casefold" || name == "isdigit" || name == "isdecimal" || name == "isnumeric" ||
      name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return make([method](const std::string& text, CallArgs& call) -> Value {
      bind_arguments(method, call, {});
      if (method == "upper") return Value::string(python_upper(text));
      if (method == "lower" || method == "casefold") return Value::string(python_lower(text));
      if (method == "title") return Value::string(python_title(text));
      if (method == "capitalize") return Value::string(python_capitalize(text));
      if (method == "isdigit" || method == "isdecimal" || method == "isnumeric") {
        return Value::boolean(all_code_points(text, is_decimal));
      }
      if (method == "isalpha") return Value::boolean(all_code_points(text, is_letter));
      if (method == "isalnum") {
        return Value::boolean(
            all_code_points(text, [](char32_t cp) { return is_letter(cp) || is_decimal(cp); }));
      }
      if (method == "isspace") return Value::boolean(all_code_points(text, is_python_space));
      return Value::boolean(has_case(text, method == "isupper"));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return make([method](const std::string& text, CallArgs& call) -> Value {
      Args a = bind_arguments(method, call, {"sub", "start", "end"});
      if (a[1] || a[2]) raise_error(method + " with start/end arguments is not supported");
      const std::string& sub = require_string(a[0], "sub");
      if (method == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(text)) + 1);
        int64_t count = 0;
        for (size_t at = text.find(sub); at != std::string::npos;
             at = text.find(sub, at + sub.size())) {
          ++count;
        }
        return Value::integer(count);
      }
      const bool reverse = method == "rfind" || method == "rindex";
      const size_t at = reverse ? text.rfind(sub) : text.find(sub);
      if (at == std::string::npos) {
        if (method == "index" || method == "rindex") raise_error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(char_index(text, at));
    });
  }
  if (name == "join") {
    return make([method, &interpreter](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"iterable"});
      const std::vector<Value> items = interpreter.iterate(a[0].value_or(Value::none()));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) {
          raise_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                      python_type_name(items[i]) + " found");
        }
        if (i > 0) out += text;
        out += items[i].as_string();
        interpreter.check_size(out.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "format") {
    return make([&interpreter](const std::string& text, CallArgs& call) {
      std::string out = python_format(text, call);
      interpreter.check_size(out.size());
      return Value::string(std::move(out));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return make([prefix, method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"affix"});
      const std::string& affix = require_string(a[0], "argument");
      if (affix.size() <= text.size()) {
        if (prefix && text.compare(0, affix.size(), affix) == 0) {
          return Value::string(text.substr(affix.size()));
        }
        if (!prefix && text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
          return Value::string(text.substr(0, text.size() - affix.size()));
        }
      }
      return Value::string(text);
    });
  }
  if (name == "partition" || name == "rpartition") {
    const bool reverse = name == "rpartition";
    return make([reverse, method](const std::string& text, CallArgs& call) {
      Args a = bind_arguments(method, call, {"sep"});
      const std::string& sep = require_string(a[0], "sep");
      if (sep.empty()) raise_error("empty separator");
      const size_t at = reverse ? text.rfind(sep) : text.find(sep);
      if (at == std::string::npos) {
        return reverse
                   ? Value::list({Value::string(""), Value::string(""), Value::string(text)}, true)
                   : Value::list({Value::string(text), Value::string(""), Value::string("")}, true);
      }
      return Value::list({Value::string(text.substr(0, at)), Value::string(sep),
                          Value::string(text.substr(at + sep.size()))},
                         true);
    });
  }
  return std::nullopt;
}

std::optional<Value> dict_method(JinjaInterpreter& interpreter, const Value& object,
                                 std::string_view name) {
  (void)interpreter;
  const std::string method(name);
  if (name == "items" || name == "keys" || name == "values" || name == "copy") {
    return bound(method, [object, method](CallArgs& call) -> Value {
      bind_arguments(method, call, {});
      if (method == "copy") return object;
      std::vector<Value> out;
      for (const auto& [key, value] : object.as_dict().items) {
        if (method == "items") {
          out.push_back(Value::list({key, value}, true));
        } else {
          out.push_back(method == "keys" ? key : value);
        }
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(method, [object, method](CallArgs& call) {
      Args a = bind_arguments(method, call, {"key", "default"});
      if (!a[0]) raise_error("get expected at least 1 argument, got 0");
      const Value* found = object.as_dict().find(*a[0]);
      return found ? *found : a[1].value_or(Value::none());
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
      name == "clear") {
    return unsafe(object, name);
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& object, std::string_view name) {
  const std::string method(name);
  if (name == "index" || name == "count") {
    return bound(method, [object, method](CallArgs& call) {
      Args a = bind_arguments(method, call, {"value"});
      const Value needle = a[0].value_or(Value::none());
      const auto& items = object.as_list();
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!values_equal(items[i], needle)) continue;
        if (method == "index") return Value::integer(static_cast<int64_t>(i));
        ++count;
      }
      if (method == "index") raise_error(to_python_repr(needle) + " is not in list");
      return Value::integer(count);
    });
  }
  if (name == "copy" && !object.is_tuple()) {
    return bound(method, [object](CallArgs&) { return object; });
  }
  if (!object.is_tuple() &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
    return unsafe(object, name);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(JinjaInterpreter& interpreter, const Value& object,
                                 std::string_view name) {
  switch (object.kind()) {
    case ValueKind::kString:
      return string_method(interpreter, object, name);
    case ValueKind::kDict:
      return dict_method(interpreter, object, name);
    case ValueKind::kList:
      return list_method(object, name);
    default:
      return std::nullopt;
  }
}

}  // namespace tachyon::jinja
