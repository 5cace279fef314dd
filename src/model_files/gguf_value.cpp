#include "model_files/gguf_value.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tachyon {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(data_) || std::holds_alternative<int64_t>(data_);
}

bool GgufValue::is_float() const { return std::holds_alternative<double>(data_); }

std::optional<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&data_)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data_); i && *i >= 0) return static_cast<uint64_t>(*i);
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* i = std::get_if<int64_t>(&data_)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data_);
      u && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* f = std::get_if<double>(&data_)) return *f;
  if (const auto* u = std::get_if<uint64_t>(&data_)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data_)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data_)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&data_); }

const GgufArray* GgufValue::as_array() const { return std::get_if<GgufArray>(&data_); }

std::string GgufValue::to_display_string(size_t max_items) const {
  if (const auto* u = std::get_if<uint64_t>(&data_)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&data_)) return std::to_string(*i);
  if (const auto* f = std::get_if<double>(&data_)) return fmt::format("{:g}", *f);
  if (const auto* b = std::get_if<bool>(&data_)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&data_)) {
    constexpr size_t kMaxChars = 60;
    std::string shown = s->size() > kMaxChars ? s->substr(0, kMaxChars) + "…" : *s;
    for (char& c : shown) {
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    return "\"" + shown + "\"";
  }
  const GgufArray& items = std::get<GgufArray>(data_);
  std::string out = "[";
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    if (i) out += ", ";
    out += items[i].to_display_string(max_items);
  }
  if (items.size() > max_items) out += fmt::format(", … ({} items)", items.size());
  return out + "]";
}

}  // namespace tachyon
