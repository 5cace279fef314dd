#include "kv_cache/kv_cache_type.h"

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/convert.h"

namespace tachyon {

Result<DType> parse_kv_cache_type(std::string_view name) {
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  if (name == "q8") return DType::kQ8_0;
  return invalid_argument(fmt::format("unknown KV cache type '{}': expected f16, f32 or q8", name));
}

std::string_view kv_cache_type_name(DType type) {
  switch (type) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kQ8_0:
      return "q8";
    default:
      return "unsupported";
  }
}

Status check_kv_cache_type(DType type, int head_size) {
  if (type != DType::kF16 && type != DType::kF32 && type != DType::kQ8_0) {
    return unsupported(fmt::format("a KV cache stores f16, f32 or q8, not {}", dtype_name(type)));
  }
  if (type == DType::kQ8_0 && head_size % kernels::kQ8Group != 0) {
    return unsupported(
        fmt::format("a q8 KV cache needs heads of a multiple of {} values; this "
                    "model's hold {} (use --cache-type f16)",
                    kernels::kQ8Group, head_size));
  }
  return Status();
}

int64_t kv_cache_bytes(DType type, int64_t values) {
  switch (type) {
    case DType::kF32:
      return values * 4;
    case DType::kF16:
      return values * 2;
    case DType::kQ8_0:
      TACHYON_CHECK(values % kernels::kQ8Group == 0);
      return values + values / kernels::kQ8Group * 2;
    default:
      TACHYON_CHECK(false && "not a KV cache type");
      return 0;
  }
}

}  // namespace tachyon
