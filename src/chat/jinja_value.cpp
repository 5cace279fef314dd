#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_error.h"
#include "chat/python_text.h"

namespace tachyon::jinja {

Value Value::undefined(std::string hint) {
  return Value(UndefinedValue{std::make_shared<const std::string>(std::move(hint))});
}
Value Value::string(std::string s) {
  return Value(std::make_shared<const std::string>(std::move(s)));
}
namespace {

int checked_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw TemplateError(-1,
                        "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels",
                        StatusCode::kOutOfRange);
  }
  return depth;
}

}  // namespace

int value_depth(const Value& value) {
  if (value.is_list()) return value.list_depth();
  if (value.is_dict()) return value.as_dict().depth;
  return 0;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, value_depth(item));
  data->depth = checked_depth(depth + 1);
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Value(ListPtr(std::move(data)));
}
Value Value::dict(std::shared_ptr<DictData> data) {
  return Value(DictPtr(std::move(data)));
}
int Value::list_depth() const {
  return std::get<ListPtr>(data_)->depth;
}
Value Value::dict(DictData data) {
  return dict(std::make_shared<DictData>(std::move(data)));
}
Value Value::name_space(std::shared_ptr<Namespace> ns) {
  return Value(std::move(ns));
}
Value Value::callable(std::shared_ptr<const Callable> fn) {
  return Value(std::move(fn));
}
Value Value::loop(std::shared_ptr<const LoopState> state) {
  return Value(std::move(state));
}

bool Value::is_tuple() const {
  return is_list() && std::get<ListPtr>(data_)->is_tuple;
}
const std::vector<Value>& Value::as_list() const {
  return std::get<ListPtr>(data_)->items;
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  const auto& hint = std::get<UndefinedValue>(data_).hint;
  return hint ? *hint : kEmpty;
}

bool Value::truthy() const {
  switch (kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return as_bool();
    case ValueKind::kInt:
      return as_int() != 0;
    case ValueKind::kFloat:
      return as_double() != 0.0;
    case ValueKind::kString:
      return !as_string().empty();
    case ValueKind::kList:
      return !as_list().empty();
    case ValueKind::kDict:
      return !as_dict().items.empty();
    default:
      return true;
  }
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  depth = std::max(depth, checked_depth(std::max(value_depth(key), value_depth(value)) + 1));
  for (auto& [k, v] : items) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

void DictData::append(Value key, Value value) {
  depth = std::max(depth, checked_depth(std::max(value_depth(key), value_depth(value)) + 1));
  items.emplace_back(std::move(key), std::move(value));
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const auto& x = a.as_dict().items;
      const auto& y = b.as_dict();
      if (x.size() != y.items.size()) return false;
      for (const auto& [key, value] : x) {
        const Value* other = y.find(key);
        if (!other || !values_equal(value, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case ValueKind::kCallable:
      return &a.as_callable() == &b.as_callable();
    case ValueKind::kLoop:
      return &a.as_loop() == &b.as_loop();
    default:
      return false;
  }
}

bool value_less(const Value& a, const Value& b, bool* comparable) {
  *comparable = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 = code point
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return value_less(x[i], y[i], comparable);
    }
    return x.size() < y.size();
  }
  *comparable = false;
  return false;
}

std::string format_python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string_view text(buffer, static_cast<size_t>(result.ptr - buffer));
  std::string out;
  if (!text.empty() && text[0] == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  const size_t e_pos = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::string_view exponent_text = text.substr(e_pos + 1);
  if (!exponent_text.empty() && exponent_text[0] == '+') exponent_text.remove_prefix(1);
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  const int decimal_point = exponent + 1;  // digits are 0.d1d2... x 10^decimal_point
  const int num_digits = static_cast<int>(digits.size());
  if (decimal_point > 16 || decimal_point <= -4) {
    out.push_back(digits[0]);
    if (num_digits > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char exponent_buffer[16];
    std::snprintf(exponent_buffer, sizeof(exponent_buffer), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exponent_buffer;
  } else if (decimal_point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decimal_point), '0');
    out += digits;
  } else if (decimal_point >= num_digits) {
    out += digits;
    out.append(static_cast<size_t>(decimal_point - num_digits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decimal_point));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decimal_point), std::string::npos);
  }
  return out;
}

void append_python_string_repr(std::string_view text, std::string& out) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  char buffer[16];
  for (char32_t cp : utf8_decode(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(cp));
      out += buffer;
    } else if (cp < 0x7F || is_python_printable(cp)) {
      utf8_append(cp, out);
    } else if (cp <= 0xFF) {
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(cp));
      out += buffer;
    } else if (cp <= 0xFFFF) {
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(cp));
      out += buffer;
    } else {
      std::snprintf(buffer, sizeof(buffer), "\\U%08x", static_cast<unsigned>(cp));
      out += buffer;
    }
  }
  out.push_back(quote);
}

namespace {

void append_repr(const Value& value, std::string& out, int depth);

std::string namespace_str(const Value& value, int depth) {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : value.as_namespace().attributes.items) {
    if (!first) out += ", ";
    first = false;
    append_repr(k, out, depth + 1);
    out += ": ";
    append_repr(v, out, depth + 1);
  }
  out += "}>";
  return out;
}

void append_repr(const Value& value, std::string& out, int depth) {
  // Namespaces can refer to themselves; Python would raise RecursionError somewhere here too.
  if (depth > kMaxValueDepth) {
    throw TemplateError(-1, "value nested too deeply to print", StatusCode::kOutOfRange);
  }
  switch (value.kind()) {
    case ValueKind::kUndefined:
      out += "Undefined";
      return;
    case ValueKind::kString:
      append_python_string_repr(value.as_string(), out);
      return;
    case ValueKind::kList: {
      const bool tuple = value.is_tuple();
      const auto& items = value.as_list();
      out.push_back(tuple ? '(' : '[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        append_repr(items[i], out, depth + 1);
      }
      if (tuple && items.size() == 1) out.push_back(',');
      out.push_back(tuple ? ')' : ']');
      return;
    }
    case ValueKind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, v] : value.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        append_repr(k, out, depth + 1);
        out += ": ";
        append_repr(v, out, depth + 1);
      }
      out.push_back('}');
      return;
    }
    case ValueKind::kNamespace:
      out += namespace_str(value, depth);
      return;
    default:
      out += to_python_str(value);
  }
}

}  // namespace

void append_python_repr(const Value& value, std::string& out) {
  append_repr(value, out, 0);
}

std::string to_python_repr(const Value& value) {
  std::string out;
  append_python_repr(value, out);
  return out;
}

std::string to_python_str(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return value.as_bool() ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(value.as_int());
    case ValueKind::kFloat:
      return format_python_float(value.as_double());
    case ValueKind::kString:
      return value.as_string();
    case ValueKind::kNamespace:
      return namespace_str(value, 0);
    case ValueKind::kCallable:
      return "<function " + value.as_callable().name + ">";
    case ValueKind::kLoop:
      return "<LoopContext " + std::to_string(value.as_loop().index0 + 1) + "/" +
             std::to_string(value.as_loop().items->size()) + ">";
    default:
      return to_python_repr(value);
  }
}

std::string python_type_name(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      return value.is_tuple() ? "tuple" : "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "Namespace";
    case ValueKind::kCallable:
      return "function";
    case ValueKind::kLoop:
      return "LoopContext";
  }
  return "object";
}

namespace {

void append_json_string(std::string_view text, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  char buffer[16];
  auto escape_unit = [&](unsigned unit) {
    std::snprintf(buffer, sizeof(buffer), "\\u%04x", unit);
    out += buffer;
  };
  auto escape_simple = [&](char32_t cp) {
    switch (cp) {
      case '"':
        out += "\\\"";
        return true;
      case '\\':
        out += "\\\\";
        return true;
      case '\n':
        out += "\\n";
        return true;
      case '\r':
        out += "\\r";
        return true;
      case '\t':
        out += "\\t";
        return true;
      case '\b':
        out += "\\b";
        return true;
      case '\f':
        out += "\\f";
        return true;
      default:
        return false;
    }
  };
  if (!ensure_ascii) {
    for (char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (escape_simple(byte)) continue;
      if (byte < 0x20) {
        escape_unit(byte);
      } else {
        out.push_back(c);
      }
    }
  } else {
    for (char32_t cp : utf8_decode(text)) {
      if (escape_simple(cp)) continue;
      if (cp >= 0x20 && cp <= 0x7E) {
        out.push_back(static_cast<char>(cp));
      } else if (cp <= 0xFFFF) {
        escape_unit(static_cast<unsigned>(cp));
      } else {
        const char32_t v = cp - 0x10000;
        escape_unit(0xD800 | static_cast<unsigned>(v >> 10));
        escape_unit(0xDC00 | static_cast<unsigned>(v & 0x3FF));
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  return format_python_float(value);
}

bool dump_json(const Value& value, const JsonDumpOptions& options, int level, std::string& out,
               std::string& error) {
  if (level > 200) {
    error = "tojson: value nested too deeply";
    return false;
  }
  auto newline_indent = [&](int depth) {
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += options.indent;
  };
  switch (value.kind()) {
    case ValueKind::kNone:
      out += "null";
      return true;
    case ValueKind::kBool:
      out += value.as_bool() ? "true" : "false";
      return true;
    case ValueKind::kInt:
      out += std::to_string(value.as_int());
      return true;
    case ValueKind::kFloat:
      out += json_float(value.as_double());
      return true;
    case ValueKind::kString:
      append_json_string(value.as_string(), options.ensure_ascii, out);
      return true;
    case ValueKind::kList: {
      const auto& items = value.as_list();
      if (items.empty()) {
        out += "[]";
        return true;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.has_indent) newline_indent(level + 1);
        if (!dump_json(items[i], options, level + 1, out, error)) return false;
      }
      if (options.has_indent) newline_indent(level);
      out.push_back(']');
      return true;
    }
    case ValueKind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : value.as_dict().items) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return true;
      }
      if (options.sort_keys) {
        bool comparable = true;
        std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
          bool ok = true;
          const bool less = value_less(a->first, b->first, &ok);
          comparable = comparable && ok;
          return less;
        });
        if (!comparable) {
          error = "tojson: cannot sort keys of different types";
          return false;
        }
      }
      out.push_back('{');
      bool first = true;
      for (const auto* entry : entries) {
        if (!first) out += options.item_separator;
        first = false;
        if (options.has_indent) newline_indent(level + 1);
        const Value& key = entry->first;
        if (key.is_string()) {
          append_json_string(key.as_string(), options.ensure_ascii, out);
        } else if (key.is_none() || key.is_bool() || key.is_int()) {
          out.push_back('"');
          out += key.is_none()   ? "null"
                 : key.is_bool() ? (key.as_bool() ? "true" : "false")
                                 : std::to_string(key.as_int());
          out.push_back('"');
        } else if (key.is_float()) {
          out += "\"" + json_float(key.as_double()) + "\"";
        } else {
          error =
              "tojson: keys must be str, int, float, bool or None, not " + python_type_name(key);
          return false;
        }
        out += options.key_separator;
        if (!dump_json(entry->second, options, level + 1, out, error)) return false;
      }
      if (options.has_indent) newline_indent(level);
      out.push_back('}');
      return true;
    }
    default:
      error = "tojson: Object of type " + python_type_name(value) + " is not JSON serializable";
      return false;
  }
}

}  // namespace

bool dump_python_json(const Value& value, const JsonDumpOptions& options, std::string& out,
                      std::string& error) {
  return dump_json(value, options, 0, out, error);
}

bool value_from_json(const boost::json::value& json, Value& out, std::string& error) {
  switch (json.kind()) {
    case boost::json::kind::null:
      out = Value::none();
      return true;
    case boost::json::kind::bool_:
      out = Value::boolean(json.get_bool());
      return true;
    case boost::json::kind::int64:
      out = Value::integer(json.get_int64());
      return true;
    case boost::json::kind::uint64:
      if (json.get_uint64() > static_cast<uint64_t>(INT64_MAX)) {
        error = "integer " + std::to_string(json.get_uint64()) + " is too large";
        return false;
      }
      out = Value::integer(static_cast<int64_t>(json.get_uint64()));
      return true;
    case boost::json::kind::double_:
      out = Value::floating(json.get_double());
      return true;
    case boost::json::kind::string: {
      const auto& s = json.get_string();
      out = Value::string(std::string(s.data(), s.size()));
      return true;
    }
    case boost::json::kind::array: {
      std::vector<Value> items;
      items.reserve(json.get_array().size());
      for (const auto& item : json.get_array()) {
        Value converted;
        if (!value_from_json(item, converted, error)) return false;
        items.push_back(std::move(converted));
      }
      out = Value::list(std::move(items));
      return true;
    }
    case boost::json::kind::object: {
      auto data = std::make_shared<DictData>();
      for (const auto& [key, item] : json.get_object()) {
        Value converted;
        if (!value_from_json(item, converted, error)) return false;
        // boost::json objects already hold unique keys.
        data->append(Value::string(std::string(key.data(), key.size())), std::move(converted));
      }
      out = Value::dict(std::move(data));
      return true;
    }
  }
  return false;
}

}  // namespace tachyon::jinja
