// One level for every kernel family, decided from the CPU's features (kernel_level.h): each
// family's code runs at the active level, and on a CPU with AVX2 + FMA none runs its portable
// code (a clone keyed on a CPU model, as GCC's arch=haswell, sent every AMD Zen 1-3 to SSE2).
#include "kernels/cpu/kernel_level.h"

#include <vector>

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bandwidth_probe.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"

namespace tachyon::kernels {
namespace {

// Calls one kernel of every family (small sizes; the numbers are other tests' business).
void run_every_family() {
  constexpr int kSize = 64;
  std::vector<float> x(kSize, 0.5f), weight(kSize, 1.0f), out(kSize), y(kSize, 0.25f);
  rms_norm(x.data(), weight.data(), kSize, 1e-6f, out.data());
  swiglu(x.data(), y.data(), kSize, out.data());
  geglu(x.data(), y.data(), kSize, out.data());
  EXPECT_EQ(argmax(weight.data(), kSize), 0);

  std::vector<float> cos(kSize / 2, 1.0f), sin(kSize / 2, 0.0f);
  rope_rotate(x.data(), 1, kSize, cos.data(), sin.data(), /*adjacent_pairs=*/false);

  const int head_size = kSize, positions = 8;
  std::vector<float> query(head_size, 0.1f), keys(head_size * positions, 0.2f),
      values(positions * head_size, 0.3f), scores(positions), accumulator(head_size, 0.0f);
  float running_max = -1e30f, running_sum = 0.0f;
  attention_block_update(query.data(), 1, head_size, 0.125f, positions, keys.data(), positions,
                         values.data(), scores.data(), &running_max, &running_sum,
                         accumulator.data());
  attention_finish(accumulator.data(), &running_sum, 1, head_size, out.data());
  EXPECT_NEAR(out[0], 0.3f, 1e-6f);

  std::vector<uint16_t> half(kSize);
  f32_to_f16_row(x.data(), half.data(), kSize);
  f16_to_f32_row(half.data(), out.data(), kSize);

  std::vector<float> probe(1024, 1.0f);
  EXPECT_EQ(sum_floats(probe.data(), probe.data() + probe.size()), 1024.0f);

  ThreadPool pool(1);
  std::vector<float> matrix(16 * kSize, 0.5f), product(16);
  WeightMatrix w;
  w.type = DType::kF32;
  w.data = reinterpret_cast<const uint8_t*>(matrix.data());
  w.rows = 16;
  w.cols = kSize;
  matmul(w, x.data(), 1, product.data(), pool);
}

TEST(KernelLevelTest, EveryFamilyRunsAtTheActiveLevel) {
  run_every_family();
  for (int f = 0; f < kNumKernelFamilies; ++f) {
    const auto family = static_cast<KernelFamily>(f);
    // Only matmul has tile kernels: at the amx level the others run their avx512 code.
    const KernelLevel expected = family == KernelFamily::kMatmul
                                     ? active_kernel_level()
                                     : vector_level(active_kernel_level());
    EXPECT_EQ(family_level(family), expected) << kernel_family_name(family);
  }
}

TEST(KernelLevelTest, NoFamilyRunsPortableCodeOnACpuWithAvx2AndFma) {
  const CpuFeatures& cpu = CpuFeatures::get();
  if (!(cpu.avx2 && cpu.fma && cpu.f16c)) GTEST_SKIP() << "this CPU lacks AVX2 + FMA + F16C";
  // On such a CPU the portable level runs only when TACHYON_CPU_LEVEL asks for it.
  if (active_kernel_level() == KernelLevel::kReference) {
    GTEST_SKIP() << "TACHYON_CPU_LEVEL=portable";
  }
  EXPECT_NE(best_kernel_level(), KernelLevel::kReference);
  run_every_family();
  for (int f = 0; f < kNumKernelFamilies; ++f) {
    const auto family = static_cast<KernelFamily>(f);
    EXPECT_NE(family_level(family), KernelLevel::kReference)
        << kernel_family_name(family) << " ran its portable code on " << cpu.describe();
  }
  EXPECT_EQ(describe_family_levels().find("portable"), std::string::npos)
      << describe_family_levels();
}

TEST(KernelLevelTest, LevelsFollowTheCpuFeatures) {
  const CpuFeatures& cpu = CpuFeatures::get();
  EXPECT_TRUE(kernel_level_available(KernelLevel::kReference));
  EXPECT_EQ(kernel_level_available(KernelLevel::kAvx2), cpu.has_avx2_kernels());
  EXPECT_EQ(kernel_level_available(KernelLevel::kAvx512), cpu.has_avx512_kernels());
  // amx also needs the kernel's permission (arch_prctl), which the CPU bits cannot show.
  if (kernel_level_available(KernelLevel::kAmx)) {
    EXPECT_TRUE(cpu.amx_int8);
  }
  if (!cpu.amx_int8 || !cpu.has_avx512_kernels()) {
    EXPECT_FALSE(kernel_level_available(KernelLevel::kAmx));
  }
  EXPECT_TRUE(kernel_level_available(active_kernel_level()));
  EXPECT_EQ(kernel_level_name(KernelLevel::kReference), "portable");
  EXPECT_EQ(kernel_level_name(KernelLevel::kAvx2), "avx2");
  EXPECT_EQ(kernel_level_name(KernelLevel::kAvx512), "avx512");
  EXPECT_EQ(kernel_level_name(KernelLevel::kAmx), "amx");
}

}  // namespace
}  // namespace tachyon::kernels
