#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

namespace {
// XGETBV without needing -mxsave: which register states the OS saves on context switches.
inline unsigned long long _xgetbv_state() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}
}  // namespace
#endif

namespace tachyon {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// Reads the CPUID feature bits (and checks that the OS saves AVX and AVX-512 state), which
// works the same with every compiler; __builtin_cpu_supports does not know every feature
// name in every compiler version.
CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // Leaf 0: the vendor string in EBX, EDX, ECX ("Genu", "ineI", "ntel").
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    f.intel = ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e;
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool os_saves_ymm = (ecx & bit_OSXSAVE) && ((_xgetbv_state() & 0x6) == 0x6);
  const bool os_saves_zmm = os_saves_ymm && ((_xgetbv_state() & 0xe0) == 0xe0);
  f.fma = os_saves_ymm && (ecx & bit_FMA);
  f.f16c = os_saves_ymm && (ecx & bit_F16C);
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = os_saves_ymm && (ebx & bit_AVX2);
  f.avx512f = os_saves_zmm && (ebx & bit_AVX512F);
  f.avx512bw = os_saves_zmm && (ebx & bit_AVX512BW);
  f.avx512vl = os_saves_zmm && (ebx & bit_AVX512VL);
  f.avx512vnni = os_saves_zmm && (ecx & bit_AVX512VNNI);
  // AMX: CPUID.(7,0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8); XCR0 bits 17-18 (XTILECFG,
  // XTILEDATA) say the OS manages tile state. Linux still wants each process to ask for it
  // (arch_prctl ARCH_REQ_XCOMP_PERM), which kernels/cpu/kernel_level.cpp does.
  const bool os_saves_tiles = os_saves_zmm && ((_xgetbv_state() & 0x60000) == 0x60000);
  f.amx_int8 = os_saves_tiles && (edx & (1u << 24)) && (edx & (1u << 25));
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  if (__get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1)) {
    f.avx512bf16 = os_saves_zmm && (eax1 & (1u << 5));  // CPUID.(7,1):EAX bit 5
  }
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures(); }
#endif

}  // namespace

const CpuFeatures& CpuFeatures::get() {
  static const CpuFeatures features = detect();
  return features;
}

std::string CpuFeatures::describe() const {
  std::string out;
  auto add = [&](bool present, const char* name) {
    if (!present) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(amx_int8, "amx_int8");
  return out.empty() ? "scalar" : out;
}

}  // namespace tachyon
