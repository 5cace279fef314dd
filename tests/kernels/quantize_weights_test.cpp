#include "kernels/reference/quantize_weights.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"

namespace tachyon {
namespace {

std::string read_golden(const std::string& name) {
  std::ifstream in(std::string(TACHYON_SOURCE_DIR) + "/tests/golden/quantizers/" + name,
                   std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The bytes the PyPI gguf package's quantizers write for the same f32 weights
// (tools/make_quantizer_golden.py: random blocks at many scales, a zero block, exact ties,
// one-signed blocks, max == min, and values whose f16 scale overflows).
TEST(QuantizeWeightsTest, WritesTheGgufPackagesBytes) {
  const std::string input = read_golden("input.f32");
  ASSERT_EQ(input.size(), 64u * 32 * sizeof(float));
  std::vector<float> weights(input.size() / sizeof(float));
  std::memcpy(weights.data(), input.data(), input.size());
  for (const DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    const std::string want = read_golden(std::string(dtype_name(type)) + ".bin");
    ASSERT_EQ(want.size(), weights.size() / 32 * dtype_info(type).block_bytes) << dtype_name(type);
    std::string got(want.size(), '\0');
    ASSERT_TRUE(reference::quantize_weights(type, weights.data(),
                                            static_cast<int64_t>(weights.size()), got.data())
                    .ok());
    for (size_t block = 0; block < weights.size() / 32; ++block) {
      const size_t bytes = dtype_info(type).block_bytes;
      EXPECT_EQ(got.substr(block * bytes, bytes), want.substr(block * bytes, bytes))
          << dtype_name(type) << " block " << block;
    }
  }
}

TEST(QuantizeWeightsTest, RejectsWhatItCannotWrite) {
  std::vector<float> weights(48, 1.0f);
  std::vector<uint8_t> out(256);
  Status status = reference::quantize_weights(DType::kQ8_0, weights.data(), 48, out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  status = reference::quantize_weights(DType::kQ4_K, weights.data(), 32, out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not whole super-blocks of 256"), std::string::npos)
      << status.message();
  status = reference::quantize_weights(DType::kQ3_K, weights.data(), 256, out.data());
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("cannot quantize weights to Q3_K"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace tachyon
