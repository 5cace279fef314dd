// One KV head's keys or values stored 8-bit (kv_cache_type.h), as the attention kernels read them
// in place: int8 values and, apart, their f16 scales (one per 32 values of a position).
#pragma once

#include <cstdint>

namespace tachyon {

struct Q8Plane {
  const int8_t* data;
  const uint16_t* scales;  // f16 bits
};

}  // namespace tachyon
