#include "kernels/reference/fp8.h"

#include <openssl/evp.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace tachyon {
namespace {

std::string fmt_hex(unsigned char byte) {
  static const char kDigits[] = "0123456789abcdef";
  return {kDigits[byte >> 4], kDigits[byte & 15]};
}

boost::json::object golden() {
  std::ifstream in(std::string(TACHYON_SOURCE_DIR) + "/tests/golden/fp8/fp8.json");
  std::stringstream text;
  text << in.rdbuf();
  return boost::json::parse(text.str()).as_object();
}

// Every bit pattern decodes to what ml_dtypes decodes it to (tools/make_fp8_golden.py).
void expect_all_patterns(const boost::json::array& want, float (*decode)(uint8_t),
                         const char* format) {
  ASSERT_EQ(want.size(), 256u);
  for (int pattern = 0; pattern < 256; ++pattern) {
    const float got = decode(static_cast<uint8_t>(pattern));
    if (want[pattern].is_string()) {
      EXPECT_TRUE(std::isnan(got)) << format << " 0x" << std::hex << pattern;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), want[pattern].to_number<uint32_t>())
          << format << " 0x" << std::hex << pattern << ": got " << got;
    }
  }
}

TEST(Fp8Test, EveryE4M3PatternMatchesMlDtypes) {
  expect_all_patterns(golden().at("e4m3").as_array(), reference::fp8_e4m3_to_f32, "E4M3");
  EXPECT_EQ(reference::fp8_e4m3_to_f32(0x7E), 448.0f);  // the largest finite value
}

TEST(Fp8Test, EveryE5M2PatternMatchesMlDtypes) {
  expect_all_patterns(golden().at("e5m2").as_array(), reference::fp8_e5m2_to_f32, "E5M2");
  EXPECT_EQ(reference::fp8_e5m2_to_f32(0x7C), INFINITY);
}

// 130x260 weights in 128x128 blocks (partial last blocks): the bits numpy gets.
TEST(Fp8Test, BlockScaledDequantizationMatchesTheModelsCode) {
  const boost::json::object blocks = golden().at("blocks").as_object();
  const int64_t rows = blocks.at("rows").to_number<int64_t>();
  const int64_t cols = blocks.at("cols").to_number<int64_t>();
  const int64_t block = blocks.at("block").to_number<int64_t>();
  std::vector<uint8_t> weights(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    weights[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
    if ((weights[i] & 0x7F) == 0x7F) weights[i] = 0;  // no NaN patterns
  }
  std::vector<float> scale;
  for (const boost::json::value& value : blocks.at("scale_inv").as_array()) {
    scale.push_back(static_cast<float>(value.to_number<double>()));
  }
  std::vector<float> out(rows * cols);
  ASSERT_TRUE(reference::dequantize_fp8_e4m3_blocks(weights.data(), rows, cols, scale.data(), 2, 3,
                                                    block, out.data())
                  .ok());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ASSERT_EQ(1, EVP_Digest(out.data(), out.size() * sizeof(float), digest, &length, EVP_sha256(),
                          nullptr));
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt_hex(digest[i]);
  EXPECT_EQ(hex, std::string_view(blocks.at("out_f32_sha256").as_string()));
  // A scale tensor of the wrong shape is an error naming both shapes.
  const Status status = reference::dequantize_fp8_e4m3_blocks(weights.data(), rows, cols,
                                                              scale.data(), 1, 3, block, out.data());
  EXPECT_EQ(status.code(), StatusCode::kCorruptData);
  EXPECT_NE(status.message().find("need a scale of shape [2, 3], got [1, 3]"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace tachyon
