// The element types a KV cache stores, in one place: their names on the command line, their
// size per value, and which models each can hold.
//   f32: exact; f16: the default (llama.cpp's too); q8: int8 with an f16 scale per 32 values of
//   a position's head (llama.cpp's q8_0 arithmetic), 34 bytes per 32 values, read in place by
//   the attention kernels.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon {

// "f16", "f32" or "q8" (the type the cache stores: DType::kF16, kF32 or kQ8_0).
Result<DType> parse_kv_cache_type(std::string_view name);
std::string_view kv_cache_type_name(DType type);

// Fails, naming both, when a cache of `type` cannot hold heads of `head_size` values (q8 groups
// a head's values by 32).
Status check_kv_cache_type(DType type, int head_size);

// Bytes `values` values take in a cache of `type` (a multiple of 32 for q8).
int64_t kv_cache_bytes(DType type, int64_t values);

}  // namespace tachyon
