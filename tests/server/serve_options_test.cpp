#include "server/serve_options.h"

#include <gtest/gtest.h>

namespace tachyon::server {
namespace {

TEST(ParseMemoryAmountTest, FractionsAndSizes) {
  Result<MemoryAmount> amount = parse_memory_amount("0.25");
  ASSERT_TRUE(amount.ok());
  EXPECT_DOUBLE_EQ(amount->fraction, 0.25);
  EXPECT_EQ(amount->bytes, 0);
  EXPECT_DOUBLE_EQ(parse_memory_amount("1")->fraction, 1.0);

  EXPECT_EQ(parse_memory_amount("2GiB")->bytes, int64_t{2} << 30);
  EXPECT_EQ(parse_memory_amount("512MiB")->bytes, int64_t{512} << 20);
  EXPECT_EQ(parse_memory_amount("512m")->bytes, int64_t{512} << 20);
  EXPECT_EQ(parse_memory_amount("1.5GB")->bytes, 1500000000);
  EXPECT_EQ(parse_memory_amount("1000000")->bytes, 1000000);
  EXPECT_EQ(parse_memory_amount("64 KiB")->bytes, 65536);
  EXPECT_DOUBLE_EQ(parse_memory_amount("2GiB")->fraction, 0.0);
}

TEST(ParseMemoryAmountTest, Rejects) {
  for (const char* text : {"", "abc", "0", "-1", "1.5", "2XB", "GiB", "nan", "inf"}) {
    Result<MemoryAmount> amount = parse_memory_amount(text);
    EXPECT_FALSE(amount.ok()) << text;
    if (!amount.ok()) {
      EXPECT_EQ(amount.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(ModelIdFromPathTest, FileNameWithoutGguf) {
  EXPECT_EQ(model_id_from_path("/a/b/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(model_id_from_path("model.bin"), "model.bin");
  EXPECT_EQ(model_id_from_path("dir/.gguf"), ".gguf");
}

}  // namespace
}  // namespace tachyon::server
