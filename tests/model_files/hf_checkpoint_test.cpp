#include "model_files/hf_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

namespace fs = std::filesystem;

const fs::path kSharded = fs::path(TACHYON_SOURCE_DIR) / "tests/golden/safetensors/sharded";

// A scratch copy of the sharded fixture folder, removed at the end of the test.
class CheckpointCopy {
 public:
  CheckpointCopy() {
    dir_ = fs::temp_directory_path() /
           ("tachyon-hf-" + std::to_string(::getpid()) + "-" + std::to_string(next_++));
    fs::remove_all(dir_);
    fs::copy(kSharded, dir_, fs::copy_options::recursive);
  }
  ~CheckpointCopy() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

 private:
  static inline int next_ = 0;
  fs::path dir_;
};

// The folder the PyPI safetensors package wrote (tools/make_safetensors_fixtures.py): two
// shards and the index transformers writes.
TEST(HfCheckpointTest, OpensAShardedFolder) {
  EXPECT_TRUE(HfCheckpoint::is_checkpoint_dir(kSharded.string()));
  auto checkpoint = HfCheckpoint::open(kSharded.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  EXPECT_EQ((*checkpoint)->shard_names(),
            (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors"}));
  EXPECT_EQ((*checkpoint)->tensors().size(), 4u);
  const SafetensorsTensor* norm = (*checkpoint)->find_tensor("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape, std::vector<int64_t>{4});
  EXPECT_EQ(norm->dtype, SafetensorsDType::kF32);
  float first;
  std::memcpy(&first, norm->data, sizeof(first));
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ((*checkpoint)->shard_of("model.norm.weight"), "model-00002-of-00002.safetensors");
  EXPECT_EQ((*checkpoint)->shard_of("model.embed_tokens.weight"),
            "model-00001-of-00002.safetensors");
  EXPECT_EQ((*checkpoint)->find_tensor("lm_head.weight"), nullptr);
  EXPECT_EQ((*checkpoint)->config().at("model_type").as_string(), "llama");
}

TEST(HfCheckpointTest, OpensASingleFileFolder) {
  CheckpointCopy copy;
  fs::remove(copy.dir() / "model.safetensors.index.json");
  fs::remove(copy.dir() / "model-00002-of-00002.safetensors");
  fs::rename(copy.dir() / "model-00001-of-00002.safetensors", copy.dir() / "model.safetensors");
  auto checkpoint = HfCheckpoint::open(copy.dir().string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  EXPECT_EQ((*checkpoint)->shard_names(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ((*checkpoint)->tensors().size(), 2u);
}

// Each broken folder gets one clear error naming the file and the tensor, and no crash.
TEST(HfCheckpointTest, RejectsBrokenFoldersWithAClearMessage) {
  struct BadCase {
    std::string what;
    std::function<void(const CheckpointCopy&)> spoil;
    StatusCode code;
    std::string message;
  };
  const std::string index = "model.safetensors.index.json";
  const std::vector<BadCase> cases = {
      {"missing shard",
       [](const CheckpointCopy& c) { fs::remove(c.dir() / "model-00002-of-00002.safetensors"); },
       StatusCode::kNotFound,
       "shard model-00002-of-00002.safetensors is missing (the index puts 2 tensors there, e.g. "
       "'model.layers.0.mlp.down_proj.weight')"},
      {"truncated shard",
       [](const CheckpointCopy& c) {
         fs::resize_file(c.dir() / "model-00001-of-00002.safetensors", 300);
       },
       StatusCode::kCorruptData, "model-00001-of-00002.safetensors: tensor"},
      {"tensor not in its shard",
       [&](const CheckpointCopy& c) {
         c.write(index, R"({"weight_map":{"model.norm.weight":"model-00001-of-00002.safetensors"}})");
       },
       StatusCode::kCorruptData,
       "the index puts tensor 'model.norm.weight' in model-00001-of-00002.safetensors, which does "
       "not hold it"},
      {"tensor in two shards",
       [](const CheckpointCopy& c) {
         fs::copy_file(c.dir() / "model-00001-of-00002.safetensors", c.dir() / "copy.safetensors");
         c.write("model.safetensors.index.json",
                 R"({"weight_map":{"model.norm.weight":"model-00002-of-00002.safetensors",)"
                 R"("model.embed_tokens.weight":"copy.safetensors",)"
                 R"("model.layers.0.self_attn.q_proj.weight":"model-00001-of-00002.safetensors"}})");
       },
       StatusCode::kCorruptData, "is in two shards, copy.safetensors and"},
      {"shard outside the folder",
       [&](const CheckpointCopy& c) {
         c.write(index, R"({"weight_map":{"x":"../../etc/passwd"}})");
       },
       StatusCode::kCorruptData, "tensor 'x' is mapped to \"../../etc/passwd\", not a file name"},
      {"index not JSON", [&](const CheckpointCopy& c) { c.write(index, "{oops"); },
       StatusCode::kCorruptData, "model.safetensors.index.json is not valid JSON"},
      {"index without weight_map", [&](const CheckpointCopy& c) { c.write(index, "{}"); },
       StatusCode::kCorruptData, "no \"weight_map\" object"},
      {"empty weight_map", [&](const CheckpointCopy& c) { c.write(index, R"({"weight_map":{}})"); },
       StatusCode::kCorruptData, "the weight_map lists no tensors"},
      {"no weights",
       [&](const CheckpointCopy& c) { fs::remove(c.dir() / index); }, StatusCode::kNotFound,
       "neither model.safetensors nor model.safetensors.index.json"},
      {"no config", [](const CheckpointCopy& c) { fs::remove(c.dir() / "config.json"); },
       StatusCode::kNotFound, "no config.json (not a Hugging Face model folder)"},
      {"config not an object", [](const CheckpointCopy& c) { c.write("config.json", "[1]"); },
       StatusCode::kCorruptData, "config.json is not a JSON object"},
  };
  for (const BadCase& c : cases) {
    CheckpointCopy copy;
    c.spoil(copy);
    auto checkpoint = HfCheckpoint::open(copy.dir().string());
    ASSERT_FALSE(checkpoint.ok()) << c.what;
    EXPECT_EQ(checkpoint.status().code(), c.code) << c.what << ": " << checkpoint.status().message();
    EXPECT_NE(checkpoint.status().message().find(c.message), std::string::npos)
        << c.what << ": got \"" << checkpoint.status().message() << "\"";
  }
}

TEST(HfCheckpointTest, AFileIsNotACheckpoint) {
  const std::string file = (kSharded / "config.json").string();
  EXPECT_FALSE(HfCheckpoint::is_checkpoint_dir(file));
  auto checkpoint = HfCheckpoint::open(file);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tachyon
