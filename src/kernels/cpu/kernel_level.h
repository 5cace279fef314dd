// KernelLevel: which instruction set the CPU kernels run, decided in this one place from the
// CPU's feature bits (CPUID, never its model name) and followed by every kernel family.
//
// TACHYON_CPU_LEVEL=portable|avx2|avx512|amx forces a level (to measure or test AVX2 on an
// AVX-512 machine, or AVX-512 without AMX tiles); a level the CPU lacks is refused with a message
// and exit status 2 rather than crashing on an illegal instruction. TACHYON_KERNELS (reference|avx2|avx512) is the older name
// and still works.
//
// A family's entry points dispatch with TACHYON_DISPATCH_BY_LEVEL (or by hand, for families with
// hand-written kernels per level) and note which level ran, so that a test can check that no
// family falls back to its portable code on a CPU with AVX2 + FMA.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace tachyon::kernels {

// kReference is the portable code: scalar oracles (matmul) or plain loops compiled for
// baseline x86-64 (SSE2). kAvx2 needs AVX2 + FMA + F16C; kAvx512 adds AVX-512 F/BW/VL/VNNI.
// kAmx is kAvx512 plus AMX tiles (AMX-TILE + AMX-INT8, and the OS's permission to use them):
// prompt-sized products of 8-bit weights run on the tiles, everything else is kAvx512's code.
enum class KernelLevel { kReference, kAvx2, kAvx512, kAmx };

// The best level this CPU has.
KernelLevel best_kernel_level();
// The level every kernel runs: the best one, or the one TACHYON_CPU_LEVEL asks for.
KernelLevel active_kernel_level();
std::string_view kernel_level_name(KernelLevel level);  // "portable", "avx2", "avx512", "amx"
// The vector code `level` runs outside the tile kernels: kAvx512 for kAmx, else `level`.
constexpr KernelLevel vector_level(KernelLevel level) {
  return level == KernelLevel::kAmx ? KernelLevel::kAvx512 : level;
}
// True when this CPU can run `level` (kReference always).
bool kernel_level_available(KernelLevel level);

// The kernel families, for reporting (tachyon info / bench) and the dispatch test.
enum class KernelFamily { kMatmul, kAttention, kElementwise, kRope, kConversion, kProbe };
constexpr int kNumKernelFamilies = 6;
std::string_view kernel_family_name(KernelFamily family);

// Which level a family's code ran at in its latest call (relaxed: for reports and tests), or
// the active level when the family has not run yet.
KernelLevel family_level(KernelFamily family);
void note_family_level(KernelFamily family, KernelLevel level);
// "matmul avx512, attention avx512, elementwise avx512, rope avx512, conversion avx512, ..."
std::string describe_family_levels();

}  // namespace tachyon::kernels

// Function attributes for the per-level copies of a kernel written in plain C++: the compiler
// vectorises the same body for each instruction set (x86-64-v3 and v4 feature sets, by
// feature, not CPU model).
#define TACHYON_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")))
#define TACHYON_TARGET_AVX512                                                   \
  __attribute__((                                                               \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx512vnni,avx2,fma," \
             "f16c,bmi,bmi2,lzcnt,popcnt")))

// Defines NAME (with parameter list PARAMS, forwarding ARGS) from an always-inline NAME##_body:
// one copy of the body per vector level and a dispatch on active_kernel_level() that notes
// FAMILY.
//   TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kRope, void, rope_rotate,
//                             (float* heads, int n), (heads, n))
#define TACHYON_DISPATCH_BY_LEVEL(FAMILY, RETURN, NAME, PARAMS, ARGS) \
  namespace {                                                         \
  TACHYON_TARGET_AVX512 RETURN NAME##_avx512 PARAMS {                 \
    return NAME##_body ARGS;                                          \
  }                                                                   \
  TACHYON_TARGET_AVX2 RETURN NAME##_avx2 PARAMS {                     \
    return NAME##_body ARGS;                                          \
  }                                                                   \
  RETURN NAME##_portable PARAMS {                                     \
    return NAME##_body ARGS;                                          \
  }                                                                   \
  }                                                                   \
  RETURN NAME PARAMS {                                                \
    static const ::tachyon::kernels::KernelLevel level =              \
        ::tachyon::kernels::vector_level(                             \
            ::tachyon::kernels::active_kernel_level());               \
    ::tachyon::kernels::note_family_level(FAMILY, level);             \
    switch (level) {                                                  \
      case ::tachyon::kernels::KernelLevel::kAmx:                     \
      case ::tachyon::kernels::KernelLevel::kAvx512:                  \
        return NAME##_avx512 ARGS;                                    \
      case ::tachyon::kernels::KernelLevel::kAvx2:                    \
        return NAME##_avx2 ARGS;                                      \
      case ::tachyon::kernels::KernelLevel::kReference:               \
        break;                                                        \
    }                                                                 \
    return NAME##_portable ARGS;                                      \
  }
