// jinja2's built-in filters as Hugging Face's environment has them (tojson replaced by the
// json.dumps-based one). Generators (map, select, ...) come back as lists.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/python_text.h"

#include <utf8proc.h>

namespace tachyon::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

bool flag(const std::optional<Value>& value) {
  return value && value->truthy();
}

// jinja2's make_attrgetter: "a.b.0" walks getitem (key first, then attribute).
Value get_path(JinjaInterpreter& interpreter, Value item, const std::optional<Value>& attribute) {
  if (!attribute || attribute->is_none()) return item;
  if (attribute->is_integral()) return interpreter.get_item(item, *attribute);
  const std::string path = to_python_str(*attribute);
  for (const std::string& part : python_split(path, std::string("."), -1, false)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    item =
        interpreter.get_item(item, numeric ? Value::integer(std::strtoll(part.c_str(), nullptr, 10))
                                           : Value::string(part));
  }
  return item;
}

Value ignore_case(const Value& value) {
  return value.is_string() ? Value::string(python_lower(value.as_string())) : value;
}

void sort_values(std::vector<Value>& keys_then_items, std::vector<Value>& items, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  bool comparable = true;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    bool ok = true;
    const bool less = reverse ? value_less(keys_then_items[b], keys_then_items[a], &ok)
                              : value_less(keys_then_items[a], keys_then_items[b], &ok);
    comparable = comparable && ok;
    return less;
  });
  if (!comparable) raise_error("'<' not supported between the sorted values");
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Python's round(x, ndigits) for floats: correctly rounded, ties to even on the exact value.
double python_round(double value, int64_t digits) {
  if (!std::isfinite(value) || digits > 308) return value;
  if (digits < -308) return 0.0 * value;
  char buffer[512];
  if (digits >= 0) {
    std::snprintf(buffer, sizeof(buffer), "%.*f", static_cast<int>(digits), value);
    return std::strtod(buffer, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  std::snprintf(buffer, sizeof(buffer), "%.0f", value / scale);
  return std::strtod(buffer, nullptr) * scale;
}

// Python int(str, base 10) / float(str) parsing with surrounding whitespace.
std::optional<int64_t> parse_python_int(const std::string& text) {
  std::string cleaned;
  for (char c : python_strip(text, std::nullopt, true, true)) {
    if (c != '_') cleaned.push_back(c);
  }
  if (cleaned.empty()) return std::nullopt;
  size_t start = cleaned[0] == '+' || cleaned[0] == '-' ? 1 : 0;
  if (start == cleaned.size()) return std::nullopt;
  for (size_t i = start; i < cleaned.size(); ++i) {
    if (cleaned[i] < '0' || cleaned[i] > '9') return std::nullopt;
  }
  errno = 0;
  const long long value = std::strtoll(cleaned.c_str(), nullptr, 10);
  if (errno != 0) raise_error("integer overflow (tachyon integers are 64-bit)");
  return value;
}

std::optional<double> parse_python_float(const std::string& text) {
  const std::string cleaned = python_strip(text, std::nullopt, true, true);
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  const char last = cleaned.back();
  if (cleaned.find_first_of("xXpP") != std::string::npos && last != 'y' && last != 'Y') {
    return std::nullopt;  // strtod's hex floats are not Python syntax
  }
  return value;
}

Value filter_tojson(const Value& input, CallArgs& call) {
  Args a = bind_arguments("tojson", call, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = flag(a[0]);
  options.sort_keys = flag(a[3]);
  if (a[1] && !a[1]->is_none()) {
    options.has_indent = true;
    if (a[1]->is_integral()) {
      options.indent.assign(static_cast<size_t>(std::max<int64_t>(a[1]->as_int(), 0)), ' ');
    } else if (a[1]->is_string()) {
      options.indent = a[1]->as_string();
    } else {
      raise_error("tojson: indent must be an integer or a string");
    }
    options.item_separator = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->as_list().size() != 2 || !a[2]->as_list()[0].is_string() ||
        !a[2]->as_list()[1].is_string()) {
      raise_error("tojson: separators must be a pair of strings");
    }
    options.item_separator = a[2]->as_list()[0].as_string();
    options.key_separator = a[2]->as_list()[1].as_string();
  }
  std::string out;
  std::string error;
  if (!dump_python_json(input, options, out, error)) raise_error(error);
  return Value::string(std::move(out));
}

Value filter_indent(const Value& input, CallArgs& call) {
  Args a = bind_arguments("indent", call, {"width", "first", "blank"});
  if (!input.is_string()) {
    if (input.is_undefined()) fail_undefined(input);
    raise_error("indent filter needs a string, got " + python_type_name(input));
  }
  std::string indentation = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      indentation = a[0]->as_string();
    } else if (a[0]->is_integral()) {
      indentation.assign(static_cast<size_t>(std::max<int64_t>(a[0]->as_int(), 0)), ' ');
    } else {
      raise_error("indent width must be an integer or a string");
    }
  }
  const std::vector<std::string> lines = python_splitlines(input.as_string() + "\n");
  std::string out;
  if (flag(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indentation;
      out += lines[i];
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) {
        out += "\n";
        if (!lines[i].empty()) out += indentation;
      }
      out += lines[i];
    }
  }
  if (flag(a[1])) out = indentation + out;
  return Value::string(std::move(out));
}

Value select_or_reject(JinjaInterpreter& interpreter, const Value& input, CallArgs& call,
                       bool select, bool by_attribute, std::string_view filter_name) {
  if (!call.keyword.empty()) {
    raise_error(std::string(filter_name) + " does not take keyword arguments here");
  }
  size_t offset = 0;
  std::optional<Value> attribute;
  if (by_attribute) {
    if (call.positional.empty()) raise_error("Missing parameter for attribute name");
    attribute = call.positional[0];
    offset = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (call.positional.size() > offset) {
    test = to_python_str(call.positional[offset]);
    test_args.positional.assign(call.positional.begin() + static_cast<ptrdiff_t>(offset) + 1,
                                call.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : interpreter.iterate(input)) {
    interpreter.count_steps(1);
    const Value subject = get_path(interpreter, item, attribute);
    bool passed = false;
    if (test) {
      CallArgs args = test_args;
      passed = interpreter.apply_test(*test, subject, args);
    } else {
      passed = subject.truthy();
    }
    if (passed == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(JinjaInterpreter& interpreter, const Value& input, CallArgs& call) {
  std::vector<Value> out;
  if (call.positional.empty()) {
    Args a = bind_arguments("map", call, {"attribute", "default"});
    if (!a[0]) raise_error("map requires a filter name or attribute=");
    for (const Value& item : interpreter.iterate(input)) {
      Value value = get_path(interpreter, item, a[0]);
      if (value.is_undefined() && a[1]) value = *a[1];
      out.push_back(std::move(value));
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_python_str(call.positional[0]);
  CallArgs rest;
  rest.positional.assign(call.positional.begin() + 1, call.positional.end());
  rest.keyword = call.keyword;
  for (const Value& item : interpreter.iterate(input)) {
    interpreter.count_steps(1);
    CallArgs args = rest;
    out.push_back(interpreter.apply_filter(name, item, args));
  }
  return Value::list(std::move(out));
}

Value filter_sort_like(JinjaInterpreter& interpreter, std::string_view name, const Value& input,
                       CallArgs& call) {
  if (name == "dictsort") {
    Args a = bind_arguments(name, call, {"case_sensitive", "by", "reverse"});
    if (!input.is_dict()) raise_error("dictsort needs a mapping, got " + python_type_name(input));
    const std::string by = a[1] ? to_python_str(*a[1]) : "key";
    if (by != "key" && by != "value") {
      raise_error("You can only sort by either \"key\" or \"value\"");
    }
    std::vector<Value> items;
    std::vector<Value> keys;
    for (const auto& [key, value] : input.as_dict().items) {
      items.push_back(Value::list({key, value}, true));
      const Value& sort_key = by == "key" ? key : value;
      keys.push_back(flag(a[0]) ? sort_key : ignore_case(sort_key));
    }
    sort_values(keys, items, flag(a[2]));
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    Args a = bind_arguments(name, call, {"reverse", "case_sensitive", "attribute"});
    std::vector<Value> items = interpreter.iterate(input);
    std::vector<Value> keys;
    std::vector<std::string> paths;
    if (a[2] && a[2]->is_string()) {
      paths = python_split(a[2]->as_string(), std::string(","), -1, false);
    }
    for (const Value& item : items) {
      std::vector<Value> parts;
      if (paths.empty()) {
        parts.push_back(get_path(interpreter, item, a[2]));
      } else {
        for (const std::string& path : paths) {
          parts.push_back(get_path(interpreter, item, Value::string(path)));
        }
      }
      for (Value& part : parts) {
        if (!flag(a[1])) part = ignore_case(part);
      }
      keys.push_back(Value::list(std::move(parts)));
    }
    sort_values(keys, items, flag(a[0]));
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    Args a = bind_arguments(name, call, {"case_sensitive", "attribute"});
    std::vector<Value> seen;
    std::vector<Value> out;
    for (const Value& item : interpreter.iterate(input)) {
      Value key = get_path(interpreter, item, a[1]);
      if (!flag(a[0])) key = ignore_case(key);
      if (std::none_of(seen.begin(), seen.end(),
                       [&](const Value& s) { return values_equal(s, key); })) {
        seen.push_back(std::move(key));
        out.push_back(item);
      }
    }
    return Value::list(std::move(out));
  }
  // min / max: the first extreme item, compared by its (case-folded) key.
  Args a = bind_arguments(name, call, {"case_sensitive", "attribute"});
  const std::vector<Value> items = interpreter.iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key_of = [&](const Value& item) {
    Value key = get_path(interpreter, item, a[1]);
    return flag(a[0]) ? key : ignore_case(key);
  };
  Value best_key = key_of(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = key_of(items[i]);
    bool comparable = true;
    const bool better = name == "max" ? value_less(best_key, key, &comparable)
                                      : value_less(key, best_key, &comparable);
    if (!comparable) raise_error("'<' not supported between the compared values");
    if (better) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

}  // namespace

Value apply_builtin_filter(JinjaInterpreter& interpreter, std::string_view name, const Value& input,
                           CallArgs& call) {
  if (name == "tojson") return filter_tojson(input, call);
  if (name == "trim") {
    Args a = bind_arguments(name, call, {"chars"});
    std::optional<std::string> chars;
    if (a[0] && !a[0]->is_none()) chars = to_python_str(*a[0]);
    return Value::string(python_strip(to_python_str(input), chars, true, true));
  }
  if (name == "length" || name == "count") {
    bind_arguments(name, call, {});
    switch (input.kind()) {
      case ValueKind::kUndefined:
        return Value::integer(0);
      case ValueKind::kString:
        return Value::integer(static_cast<int64_t>(utf8_length(input.as_string())));
      case ValueKind::kList:
        return Value::integer(static_cast<int64_t>(input.as_list().size()));
      case ValueKind::kDict:
        return Value::integer(static_cast<int64_t>(input.as_dict().items.size()));
      default:
        raise_error("object of type '" + python_type_name(input) + "' has no len()");
    }
  }
  if (name == "default" || name == "d") {
    Args a = bind_arguments(name, call, {"default_value", "boolean"});
    if (input.is_undefined() || (flag(a[1]) && !input.truthy())) {
      return a[0].value_or(Value::string(""));
    }
    return input;
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    bind_arguments(name, call, {});
    const std::string text = to_python_str(input);
    if (name == "upper") return Value::string(python_upper(text));
    if (name == "lower") return Value::string(python_lower(text));
    if (name == "capitalize") return Value::string(python_capitalize(text));
    return Value::string(jinja_title(text));
  }
  if (name == "replace") {
    Args a = bind_arguments(name, call, {"old", "new", "count"});
    if (!a[0] || !a[1]) raise_error("replace needs old and new strings");
    int64_t count = -1;
    if (a[2] && !a[2]->is_none()) count = a[2]->is_integral() ? a[2]->as_int() : -1;
    std::string out =
        python_replace(to_python_str(input), to_python_str(*a[0]), to_python_str(*a[1]), count);
    interpreter.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "join") {
    Args a = bind_arguments(name, call, {"d", "attribute"});
    const std::string separator = a[0] ? to_python_str(*a[0]) : std::string();
    std::string out;
    bool first = true;
    for (const Value& item : interpreter.iterate(input)) {
      if (!first) out += separator;
      first = false;
      out += to_python_str(get_path(interpreter, item, a[1]));
      interpreter.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    bind_arguments(name, call, {});
    if (input.is_none() || input.is_number()) {
      raise_error("'" + python_type_name(input) + "' object is not iterable");
    }
    const std::vector<Value> items = interpreter.iterate(input);
    if (items.empty()) {
      return Value::undefined(name == "first" ? "No first item, sequence was empty."
                                              : "No last item, sequence was empty.");
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    bind_arguments(name, call, {});
    return Value::list(interpreter.iterate(input));
  }
  if (name == "string") {
    bind_arguments(name, call, {});
    return input.is_string() ? input : Value::string(to_python_str(input));
  }
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    bind_arguments(name, call, {});
    if (name == "safe") return input.is_string() ? input : Value::string(to_python_str(input));
    return Value::string(html_escape(to_python_str(input)));
  }
  if (name == "items") {
    bind_arguments(name, call, {});
    if (input.is_undefined()) return Value::list({});
    if (!input.is_dict()) raise_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [key, value] : input.as_dict().items)
      out.push_back(Value::list({key, value}, true));
    return Value::list(std::move(out));
  }
  if (name == "int") {
    Args a = bind_arguments(name, call, {"default", "base"});
    const Value fallback = a[0].value_or(Value::integer(0));
    if (a[1] && !(a[1]->is_integral() && a[1]->as_int() == 10)) {
      raise_error("int filter: only base 10 is supported");
    }
    if (input.is_integral()) return Value::integer(input.as_int());
    if (input.is_float()) {
      const double v = input.as_double();
      if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) raise_error("cannot convert float to int");
      return Value::integer(static_cast<int64_t>(v));
    }
    if (input.is_string()) {
      if (auto v = parse_python_int(input.as_string())) return Value::integer(*v);
      if (auto f = parse_python_float(input.as_string())) {
        if (!std::isfinite(*f) || std::fabs(*f) >= 9.2e18) {
          raise_error("cannot convert float to int");
        }
        return Value::integer(static_cast<int64_t>(*f));
      }
    }
    return fallback;
  }
  if (name == "float") {
    Args a = bind_arguments(name, call, {"default"});
    const Value fallback = a[0].value_or(Value::floating(0.0));
    if (input.is_number()) return Value::floating(input.as_double());
    if (input.is_string()) {
      if (auto f = parse_python_float(input.as_string())) return Value::floating(*f);
    }
    return fallback;
  }
  if (name == "abs") {
    bind_arguments(name, call, {});
    if (input.is_integral()) {
      if (input.as_int() == INT64_MIN) raise_error("integer overflow");
      return Value::integer(std::llabs(input.as_int()));
    }
    if (input.is_float()) return Value::floating(std::fabs(input.as_double()));
    if (input.is_undefined()) fail_undefined(input);
    raise_error("bad operand type for abs(): '" + python_type_name(input) + "'");
  }
  if (name == "round") {
    Args a = bind_arguments(name, call, {"precision", "method"});
    const int64_t precision = a[0] && a[0]->is_integral() ? a[0]->as_int() : 0;
    const std::string method = a[1] ? to_python_str(*a[1]) : "common";
    if (method != "common" && method != "ceil" && method != "floor") {
      raise_error("method must be common, ceil or floor");
    }
    if (input.is_undefined()) fail_undefined(input);
    if (!input.is_number()) raise_error("round needs a number, got " + python_type_name(input));
    if (method == "common") {
      if (input.is_integral() && precision >= 0) return Value::integer(input.as_int());
      return Value::floating(python_round(input.as_double(), precision));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double scaled = input.as_double() * scale;
    return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
  }
  if (name == "map") return filter_map(interpreter, input, call);
  if (name == "select" || name == "reject") {
    return select_or_reject(interpreter, input, call, name == "select", false, name);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return select_or_reject(interpreter, input, call, name == "selectattr", true, name);
  }
  if (name == "dictsort" || name == "sort" || name == "unique" || name == "min" || name == "max") {
    return filter_sort_like(interpreter, name, input, call);
  }
  if (name == "reverse") {
    bind_arguments(name, call, {});
    if (input.is_string()) {
      std::u32string code_points = utf8_decode(input.as_string());
      std::reverse(code_points.begin(), code_points.end());
      return Value::string(utf8_encode(code_points));
    }
    std::vector<Value> items = interpreter.iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sum") {
    Args a = bind_arguments(name, call, {"attribute", "start"});
    Value total = a[1].value_or(Value::integer(0));
    for (const Value& item : interpreter.iterate(input)) {
      total = binary_operation("+", total, get_path(interpreter, item, a[0]), interpreter);
    }
    return total;
  }
  if (name == "indent") return filter_indent(input, call);
  if (name == "wordcount") {
    bind_arguments(name, call, {});
    int64_t words = 0;
    bool in_word = false;
    for (char32_t cp : utf8_decode(to_python_str(input))) {
      const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      const bool word_char = cp == '_' ||
                             (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                             (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) ||
                             c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC;
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::integer(words);
  }
  if (name == "center") {
    Args a = bind_arguments(name, call, {"width"});
    const std::string text = to_python_str(input);
    const int64_t width = a[0] && a[0]->is_integral() ? a[0]->as_int() : 80;
    const int64_t length = static_cast<int64_t>(utf8_length(text));
    if (width <= length) return Value::string(text);
    interpreter.check_size(static_cast<size_t>(width));
    const int64_t margin = width - length;
    const int64_t left = margin / 2 + (margin & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + text +
                         std::string(static_cast<size_t>(margin - left), ' '));
  }
  if (name == "batch") {
    Args a = bind_arguments(name, call, {"linecount", "fill_with"});
    if (!a[0] || !a[0]->is_integral() || a[0]->as_int() <= 0) {
      raise_error("batch needs a positive line count");
    }
    const size_t size = static_cast<size_t>(a[0]->as_int());
    std::vector<Value> batches;
    std::vector<Value> current;
    for (const Value& item : interpreter.iterate(input)) {
      current.push_back(item);
      if (current.size() == size) batches.push_back(Value::list(std::exchange(current, {})));
    }
    if (!current.empty()) {
      if (a[1] && !a[1]->is_none()) {
        while (current.size() < size) current.push_back(*a[1]);
      }
      batches.push_back(Value::list(std::move(current)));
    }
    return Value::list(std::move(batches));
  }
  if (name == "attr") {
    Args a = bind_arguments(name, call, {"name"});
    const std::string attribute = a[0] ? to_python_str(*a[0]) : std::string();
    if (input.is_namespace() || input.is_loop()) return interpreter.get_attribute(input, attribute);
    if (auto method = find_method(interpreter, input, attribute)) return *method;
    return Value::undefined("'" + python_type_name(input) + " object' has no attribute '" +
                            attribute + "'");
  }
  static constexpr std::string_view kUnsupported[] = {
      "filesizeformat", "format",   "groupby",   "pprint", "random",   "slice",
      "striptags",      "truncate", "urlencode", "urlize", "wordwrap", "xmlattr"};
  for (auto unsupported : kUnsupported) {
    if (unsupported == name) {
      throw TemplateError(-1, "unsupported filter '" + std::string(name) + "'",
                          StatusCode::kUnsupported);
    }
  }
  throw TemplateError(-1, "no filter named '" + std::string(name) + "'", StatusCode::kUnsupported);
}

}  // namespace tachyon::jinja
