#include "core/dtype.h"

#include <array>

#include "core/check.h"

namespace tachyon {
namespace {

constexpr std::array kDTypes = {
    DTypeInfo{DType::kF32, "F32", 1, 4, true},
    DTypeInfo{DType::kF16, "F16", 1, 2, true},
    DTypeInfo{DType::kQ4_0, "Q4_0", 32, 18, true},
    DTypeInfo{DType::kQ4_1, "Q4_1", 32, 20, true},
    DTypeInfo{DType::kQ5_0, "Q5_0", 32, 22, true},
    DTypeInfo{DType::kQ5_1, "Q5_1", 32, 24, true},
    DTypeInfo{DType::kQ8_0, "Q8_0", 32, 34, true},
    DTypeInfo{DType::kQ8_1, "Q8_1", 32, 40, false},
    DTypeInfo{DType::kQ2_K, "Q2_K", 256, 84, true},
    DTypeInfo{DType::kQ3_K, "Q3_K", 256, 110, true},
    DTypeInfo{DType::kQ4_K, "Q4_K", 256, 144, true},
    DTypeInfo{DType::kQ5_K, "Q5_K", 256, 176, true},
    DTypeInfo{DType::kQ6_K, "Q6_K", 256, 210, true},
    DTypeInfo{DType::kQ8_K, "Q8_K", 256, 292, true},
    DTypeInfo{DType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    DTypeInfo{DType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    DTypeInfo{DType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    DTypeInfo{DType::kIQ1_S, "IQ1_S", 256, 50, false},
    DTypeInfo{DType::kIQ4_NL, "IQ4_NL", 32, 18, false},
    DTypeInfo{DType::kIQ3_S, "IQ3_S", 256, 110, false},
    DTypeInfo{DType::kIQ2_S, "IQ2_S", 256, 82, false},
    DTypeInfo{DType::kIQ4_XS, "IQ4_XS", 256, 136, false},
    DTypeInfo{DType::kI8, "I8", 1, 1, false},
    DTypeInfo{DType::kI16, "I16", 1, 2, false},
    DTypeInfo{DType::kI32, "I32", 1, 4, false},
    DTypeInfo{DType::kI64, "I64", 1, 8, false},
    DTypeInfo{DType::kF64, "F64", 1, 8, false},
    DTypeInfo{DType::kIQ1_M, "IQ1_M", 256, 56, false},
    DTypeInfo{DType::kBF16, "BF16", 1, 2, true},
    DTypeInfo{DType::kTQ1_0, "TQ1_0", 256, 54, false},
    DTypeInfo{DType::kTQ2_0, "TQ2_0", 256, 66, false},
    DTypeInfo{DType::kMXFP4, "MXFP4", 32, 17, false},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t type_id) {
  for (const DTypeInfo& info : kDTypes) {
    if (static_cast<uint32_t>(info.type) == type_id) return info;
  }
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType type) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.type == type) return info;
  }
  TACHYON_CHECK(false && "DType value outside the table");
  return kDTypes[0];
}

std::string_view dtype_name(DType type) { return dtype_info(type).name; }

}  // namespace tachyon
