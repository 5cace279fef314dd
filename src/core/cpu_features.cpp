#include "core/cpu_features.h"

namespace tachyon {

const CpuFeatures& CpuFeatures::get() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    return f;
  }();
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
  return out.empty() ? "scalar" : out;
}

}  // namespace tachyon
