// One GGUF metadata value: a scalar, a string, or an array (arrays may nest).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tachyon {

// Value type ids as stored in the file.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType type);

class GgufValue;
using GgufArray = std::vector<GgufValue>;

class GgufValue {
 public:
  GgufValue() = default;
  GgufValue(GgufValueType type, uint64_t u) : type_(type), data_(u) {}
  GgufValue(GgufValueType type, int64_t i) : type_(type), data_(i) {}
  GgufValue(GgufValueType type, double f) : type_(type), data_(f) {}
  explicit GgufValue(bool b) : type_(GgufValueType::kBool), data_(b) {}
  explicit GgufValue(std::string s) : type_(GgufValueType::kString), data_(std::move(s)) {}
  GgufValue(GgufValueType element_type, GgufArray items)
      : type_(GgufValueType::kArray), element_type_(element_type), data_(std::move(items)) {}

  GgufValueType type() const { return type_; }
  GgufValueType element_type() const { return element_type_; }  // arrays only
  bool is_array() const { return type_ == GgufValueType::kArray; }
  bool is_string() const { return type_ == GgufValueType::kString; }
  bool is_integer() const;
  bool is_float() const;

  // Conversions return nullopt when the stored value has another kind or does not fit.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;  // integers convert too
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;

  // Short human-readable form; long arrays and strings are abbreviated.
  std::string to_display_string(size_t max_items = 8) const;

 private:
  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> data_;
};

}  // namespace tachyon
