#include "kernels/cpu/kernel_level.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cpu_features.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tachyon::kernels {
namespace {

// The level each family ran last; -1 until it runs.
std::array<std::atomic<int>, kNumKernelFamilies> g_family_levels{-1, -1, -1, -1, -1, -1};
static_assert(kNumKernelFamilies == 6, "one -1 per family above");

// Linux lets a process use AMX tile data only after asking (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, since 5.16): the tiles' 8 KiB of state are then saved on context switches.
// Asked once; the permission covers every thread of the process.
bool amx_permitted() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

bool parse_level(const char* text, KernelLevel& level) {
  if (std::strcmp(text, "portable") == 0 || std::strcmp(text, "reference") == 0) {
    level = KernelLevel::kReference;
  } else if (std::strcmp(text, "avx2") == 0) {
    level = KernelLevel::kAvx2;
  } else if (std::strcmp(text, "avx512") == 0) {
    level = KernelLevel::kAvx512;
  } else if (std::strcmp(text, "amx") == 0) {
    level = KernelLevel::kAmx;
  } else {
    return false;
  }
  return true;
}

KernelLevel decide_level() {
  const KernelLevel best = best_kernel_level();
  const char* variable = "TACHYON_CPU_LEVEL";
  const char* requested = std::getenv(variable);
  if (requested == nullptr || *requested == '\0') {
    variable = "TACHYON_KERNELS";
    requested = std::getenv(variable);
  }
  if (requested == nullptr || *requested == '\0') return best;
  KernelLevel level = best;
  if (!parse_level(requested, level)) {
    std::fprintf(stderr, "tachyon: %s=%s is not a level (want portable, avx2, avx512 or amx)\n",
                 variable, requested);
    std::exit(2);
  }
  if (static_cast<int>(level) > static_cast<int>(best)) {
    std::fprintf(stderr,
                 "tachyon: %s=%s, but this CPU lacks it (it has: %s; best level: %s). avx2 "
                 "needs avx2 fma f16c; avx512 also avx512f avx512bw avx512vl avx512vnni; amx also "
                 "amx_tile amx_int8 and the kernel's permission (Linux 5.16+)\n",
                 variable, requested, CpuFeatures::get().describe().c_str(),
                 std::string(kernel_level_name(best)).c_str());
    std::exit(2);
  }
  return level;
}

}  // namespace

KernelLevel best_kernel_level() {
  const CpuFeatures& features = CpuFeatures::get();
  if (features.has_avx512_kernels() && features.amx_int8 && amx_permitted()) {
    return KernelLevel::kAmx;
  }
  if (features.has_avx512_kernels()) return KernelLevel::kAvx512;
  if (features.has_avx2_kernels()) return KernelLevel::kAvx2;
  return KernelLevel::kReference;
}

KernelLevel active_kernel_level() {
  static const KernelLevel level = decide_level();
  return level;
}

std::string_view kernel_level_name(KernelLevel level) {
  switch (level) {
    case KernelLevel::kReference:
      return "portable";
    case KernelLevel::kAvx2:
      return "avx2";
    case KernelLevel::kAvx512:
      return "avx512";
    case KernelLevel::kAmx:
      return "amx";
  }
  return "unknown";
}

bool kernel_level_available(KernelLevel level) {
  return static_cast<int>(level) <= static_cast<int>(best_kernel_level());
}

std::string_view kernel_family_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::kMatmul:
      return "matmul";
    case KernelFamily::kAttention:
      return "attention";
    case KernelFamily::kElementwise:
      return "elementwise";
    case KernelFamily::kRope:
      return "rope";
    case KernelFamily::kConversion:
      return "conversion";
    case KernelFamily::kProbe:
      return "probe";
  }
  return "unknown";
}

KernelLevel family_level(KernelFamily family) {
  const int level = g_family_levels[static_cast<int>(family)].load(std::memory_order_relaxed);
  if (level >= 0) return static_cast<KernelLevel>(level);
  return family == KernelFamily::kMatmul ? active_kernel_level()
                                         : vector_level(active_kernel_level());
}

void note_family_level(KernelFamily family, KernelLevel level) {
  if (family != KernelFamily::kMatmul) level = vector_level(level);  // only matmul has tiles
  std::atomic<int>& slot = g_family_levels[static_cast<int>(family)];
  // Read first: a store to a line every thread reads would bounce it between cores.
  if (slot.load(std::memory_order_relaxed) != static_cast<int>(level)) {
    slot.store(static_cast<int>(level), std::memory_order_relaxed);
  }
}

std::string describe_family_levels() {
  std::string out;
  for (int f = 0; f < kNumKernelFamilies; ++f) {
    const auto family = static_cast<KernelFamily>(f);
    if (!out.empty()) out += ", ";
    out += std::string(kernel_family_name(family)) + " " +
           std::string(kernel_level_name(family_level(family)));
  }
  return out;
}

}  // namespace tachyon::kernels
