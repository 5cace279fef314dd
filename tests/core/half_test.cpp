#include "core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace tachyon {
namespace {

// The value of a finite half from its definition, computed in double (exact) then narrowed
// (exact too: every half is an f32). Independent of half.h's bit shuffling.
double half_from_definition(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

TEST(HalfTest, EveryFiniteF16MatchesItsDefinition) {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    const float want = static_cast<float>(half_from_definition(static_cast<uint16_t>(h)));
    // Compare bits so -0 and +0 differ.
    if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && ++mismatches < 8) {
      ADD_FAILURE() << "half 0x" << std::hex << h << ": got " << got << ", want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(HalfTest, F16InfinityAndNanKeepSignAndPayload) {
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x7c00)), 0x7f800000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0xfc00)), 0xff800000u);
  for (uint32_t mantissa = 1; mantissa < 0x400; ++mantissa) {
    const float nan = f16_to_f32(static_cast<uint16_t>(0xfc00 | mantissa));
    ASSERT_TRUE(std::isnan(nan));
    EXPECT_EQ(std::bit_cast<uint32_t>(nan), 0xff800000u | (mantissa << 13));
  }
}

TEST(HalfTest, Bf16IsTheTopHalfOfAnF32) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc049), std::bit_cast<float>(0xc0490000u));
  EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc1)));
}

uint64_t fnv1a64_of_table(float (*convert)(uint16_t)) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t bits = std::bit_cast<uint32_t>(convert(static_cast<uint16_t>(h)));
    for (int byte = 0; byte < 4; ++byte) {  // little-endian byte order, as numpy wrote them
      hash = (hash ^ ((bits >> (8 * byte)) & 0xffu)) * 0x100000001b3ull;
    }
  }
  return hash;
}

// numpy's conversion of all 65536 inputs, NaN payloads included, hashed by
// tools/make_quant_golden.py into tests/golden/quants/half_tables.txt.
TEST(HalfTest, AllInputsMatchNumpy) {
  const std::filesystem::path path =
      std::filesystem::path(TACHYON_SOURCE_DIR) / "tests/golden/quants/half_tables.txt";
  std::ifstream file(path);
  ASSERT_TRUE(file) << "cannot open " << path;
  std::map<std::string, uint64_t> hashes;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    hashes[line.substr(0, space)] = std::stoull(line.substr(space + 1), nullptr, 16);
  }
  ASSERT_EQ(hashes.count("f16"), 1u);
  ASSERT_EQ(hashes.count("bf16"), 1u);
  EXPECT_EQ(fnv1a64_of_table(f16_to_f32), hashes["f16"]);
  EXPECT_EQ(fnv1a64_of_table(bf16_to_f32), hashes["bf16"]);
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// f32 -> f16 rounding: every half survives the round trip, and halfway cases go to even.
TEST(HalfRoundingTest, RoundTripsEveryHalfAndRoundsTiesToEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float value = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(value))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(value), h) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);           // tie, even stays 1.0
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);           // tie, rounds up to even
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);                     // just below the inf threshold
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                     // rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);        // tie between 0 and 2^-24: even
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);        // tie between 1 and 2 ulps: even
  EXPECT_EQ(f32_to_f16(-std::ldexp(1023.5f, -24)), 0x8400);    // subnormal rounding into normal
}

}  // namespace
}  // namespace tachyon
