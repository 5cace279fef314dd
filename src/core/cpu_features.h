// What the CPU can do, detected once at run time; kernels pick their variant from it.
#pragma once

#include <string>

namespace tachyon {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amx_int8 = false;  // AMX-TILE + AMX-INT8, tile state enabled in XCR0 (the OS supports it)
  bool intel = false;  // the vendor string is GenuineIntel (some tuning differs by vendor)

  bool has_avx2_kernels() const { return avx2 && fma && f16c; }
  bool has_avx512_kernels() const {
    return has_avx2_kernels() && avx512f && avx512bw && avx512vl && avx512vnni;
  }
  std::string describe() const;  // e.g. "avx2 fma f16c avx512f ..."

  static const CpuFeatures& get();
};

}  // namespace tachyon
