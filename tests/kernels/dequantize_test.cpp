#include "kernels/reference/dequantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/reference/block_layouts.h"

namespace tachyon::reference {
namespace {

const std::filesystem::path kGoldenDir =
    std::filesystem::path(TACHYON_SOURCE_DIR) / "tests" / "golden" / "quants";

// One tests/golden/quants/<TYPE>.bin file; format documented in tools/make_quant_golden.py.
struct Golden {
  uint32_t type_id = 0;
  std::vector<uint8_t> blocks;  // encoded blocks as in a GGUF tensor
  std::vector<float> expected;  // f32 [num_elements], from the gguf Python package
};

template <typename T>
T read_le(const std::vector<uint8_t>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// Returns false (with a gtest failure) when the file is missing or malformed.
bool load_golden(const std::string& type_name, Golden* golden) {
  const std::filesystem::path path = kGoldenDir / (type_name + ".bin");
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    ADD_FAILURE() << "cannot open " << path << " (run tools/make_quant_golden.py)";
    return false;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                                   std::istreambuf_iterator<char>());
  constexpr size_t kHeaderBytes = 32;
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), "TQDQ", 4) != 0 ||
      read_le<uint32_t>(bytes, 4) != 1) {
    ADD_FAILURE() << path << " has no TQDQ version 1 header";
    return false;
  }
  golden->type_id = read_le<uint32_t>(bytes, 8);
  const uint64_t num_elements = read_le<uint64_t>(bytes, 16);
  const uint64_t num_bytes = read_le<uint64_t>(bytes, 24);
  if (bytes.size() != kHeaderBytes + num_bytes + 4 * num_elements) {
    ADD_FAILURE() << path << " is " << bytes.size() << " bytes, header implies "
                  << kHeaderBytes + num_bytes + 4 * num_elements;
    return false;
  }
  golden->blocks.assign(bytes.begin() + kHeaderBytes, bytes.begin() + kHeaderBytes + num_bytes);
  golden->expected.resize(num_elements);
  std::memcpy(golden->expected.data(), bytes.data() + kHeaderBytes + num_bytes, 4 * num_elements);
  return true;
}

const char* const kGoldenTypes[] = {"F32",  "F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                    "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};

class DequantizeGoldenTest : public testing::TestWithParam<const char*> {};

// Bit-exact: the reference rounds each op in the same order as gguf/ggml, NaN payloads included.
TEST_P(DequantizeGoldenTest, MatchesGgufBitExactly) {
  Golden golden;
  ASSERT_TRUE(load_golden(GetParam(), &golden));
  const std::optional<DTypeInfo> info = dtype_info(golden.type_id);
  ASSERT_TRUE(info.has_value()) << "type id " << golden.type_id;
  ASSERT_EQ(info->name, GetParam());
  ASSERT_EQ(golden.blocks.size(),
            golden.expected.size() / info->block_elements * info->block_bytes);

  // Start at an odd address so every block and scale is unaligned (UBSan checks the reads).
  std::vector<uint8_t> shifted(golden.blocks.size() + 1);
  std::memcpy(shifted.data() + 1, golden.blocks.data(), golden.blocks.size());
  // One extra canary float past the end: dequantize must not write beyond num_elements.
  constexpr uint32_t kCanary = 0xdeadbeefu;
  std::vector<float> actual(golden.expected.size() + 1, std::bit_cast<float>(kCanary));

  const int64_t num_elements = static_cast<int64_t>(golden.expected.size());
  const Status status = dequantize(info->type, shifted.data() + 1, actual.data(), num_elements);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(std::bit_cast<uint32_t>(actual.back()), kCanary);

  int mismatches = 0;
  for (size_t i = 0; i < golden.expected.size(); ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(golden.expected[i]);
    const uint32_t got = std::bit_cast<uint32_t>(actual[i]);
    if (want != got && ++mismatches <= 8) {
      ADD_FAILURE() << GetParam() << " element " << i << " (block " << i / info->block_elements
                    << "): got " << actual[i] << " (0x" << std::hex << got << "), gguf gives "
                    << golden.expected[i] << " (0x" << want << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << golden.expected.size() << " elements";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeGoldenTest, testing::ValuesIn(kGoldenTypes),
                         [](const testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param);
                         });

// Every type the dtype table marks as dequantizable has a golden file, and no other.
TEST(DequantizeTest, GoldenFilesCoverEveryDequantizableType) {
  int num_dequantizable = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const std::optional<DTypeInfo> info = dtype_info(id);
    if (!info) continue;
    const bool has_golden =
        std::filesystem::exists(kGoldenDir / (std::string(info->name) + ".bin"));
    EXPECT_EQ(has_golden, info->can_dequantize) << info->name;
    num_dequantizable += info->can_dequantize ? 1 : 0;
  }
  EXPECT_EQ(num_dequantizable, static_cast<int>(std::size(kGoldenTypes)));
}

// dequantize() accepts exactly the types the table says it can, for every known id.
TEST(DequantizeTest, SupportMatchesDTypeTable) {
  for (uint32_t id = 0; id < 64; ++id) {
    const std::optional<DTypeInfo> info = dtype_info(id);
    if (!info) continue;
    const Status status = dequantize(info->type, nullptr, nullptr, 0);
    EXPECT_EQ(status.ok(), info->can_dequantize) << info->name << ": " << status.message();
    if (!info->can_dequantize) {
      EXPECT_EQ(status.code(), StatusCode::kUnsupported) << info->name;
      EXPECT_NE(status.message().find(info->name), std::string::npos) << status.message();
    }
  }
}

TEST(DequantizeTest, UnsupportedTypeNamesIt) {
  std::vector<uint8_t> block(66);
  std::vector<float> out(256);
  const Status status = dequantize(DType::kIQ2_XXS, block.data(), out.data(), 256);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("IQ2_XXS"), std::string::npos) << status.message();
}

TEST(DequantizeTest, UnknownTypeIdIsAnErrorNotACrash) {
  float out = 0;
  const Status status = dequantize(static_cast<DType>(99), &out, &out, 1);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("99"), std::string::npos) << status.message();
}

TEST(DequantizeTest, ElementCountNotAMultipleOfTheBlockSize) {
  std::vector<uint8_t> block(sizeof(BlockQ4_K));
  std::vector<float> out(256);
  const Status status = dequantize(DType::kQ4_K, block.data(), out.data(), 100);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("100"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("256"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("Q4_K"), std::string::npos) << status.message();

  const Status legacy = dequantize(DType::kQ8_0, block.data(), out.data(), 33);
  EXPECT_EQ(legacy.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(legacy.message().find("33"), std::string::npos) << legacy.message();
  EXPECT_NE(legacy.message().find("32"), std::string::npos) << legacy.message();
}

TEST(DequantizeTest, NegativeElementCount) {
  float out = 0;
  const Status status = dequantize(DType::kQ8_0, &out, &out, -32);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("-32"), std::string::npos) << status.message();
}

TEST(DequantizeTest, NullBufferWithElements) {
  std::vector<float> out(32);
  const Status status = dequantize(DType::kQ8_0, nullptr, out.data(), 32);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

TEST(DequantizeTest, ZeroElementsWritesNothing) {
  float out = 42.0f;
  EXPECT_TRUE(dequantize(DType::kQ6_K, nullptr, &out, 0).ok());
  EXPECT_EQ(out, 42.0f);
}

// Hand-built blocks pin down the layout in words, independent of the golden files.
TEST(DequantizeTest, HandBuiltQ4_0Block) {
  BlockQ4_0 block{};
  block.d = 0x4000;    // f16 2.0
  block.qs[0] = 0xf0;  // value 0: low nibble 0 -> (0 - 8) * 2; value 16: high 15 -> (15 - 8) * 2
  block.qs[3] = 0x98;  // value 3: 8 -> 0; value 19: 9 -> 2
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(DType::kQ4_0, &block, out.data(), 32).ok());
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[16], 14.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[19], 2.0f);
  EXPECT_EQ(out[1], -16.0f);  // qs zero -> q = 0 -> -8 * d
}

TEST(DequantizeTest, HandBuiltQ3_KBlockClearHighBitSubtractsFour) {
  BlockQ3_K block{};
  block.d = 0x3c00;  // f16 1.0
  // Scale of sub-block 0 = 33 (stored 6 bits, minus 32 -> 1): low nibble 1 in byte 0,
  // high bits 2 (binary 10) in bits 0-1 of byte 8.
  block.scales[0] = 0x01;
  block.scales[8] = 0x02;
  block.qs[0] = 0x03;     // value 0: low 2 bits 3
  block.hmask[0] = 0x01;  // value 0: high bit set -> q = 3
  block.qs[1] = 0x02;     // value 1: low 2 bits 2, high bit clear -> q = 2 - 4
  std::vector<float> out(256);
  ASSERT_TRUE(dequantize(DType::kQ3_K, &block, out.data(), 256).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], -4.0f);
}

}  // namespace
}  // namespace tachyon::reference
