#include "kv_cache/kv_disk_tier.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

namespace fs = std::filesystem;

constexpr int kBlockSize = 4;
constexpr size_t kBlockBytes = 3000;  // split in two "layers" of 1000 and 2000 bytes
// A block file: 128-byte header, the tokens, the payload.
constexpr int64_t kFileBytes = 128 + kBlockSize * 4 + kBlockBytes;

KvDiskTier::Key key_named(uint8_t seed) {
  KvDiskTier::Key key{};
  key.fill(seed);
  return key;
}

struct Block {
  BlockHash hash;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
};

Block make_block(int index) {
  Block block;
  block.tokens.resize(kBlockSize);
  std::iota(block.tokens.begin(), block.tokens.end(), index * 100);
  block.hash = BlockHash::chain(BlockHash::root(""), block.tokens);
  block.payload.resize(kBlockBytes);
  std::mt19937 random(index);
  for (uint8_t& byte : block.payload) byte = static_cast<uint8_t>(random());
  return block;
}

class KvDiskTierTest : public testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() /
                 ("kv_disk_tier_test_" + std::to_string(getpid()) + "_" +
                  testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::unique_ptr<KvDiskTier> open(int64_t max_bytes = 1 << 20, uint8_t key = 1) {
    auto tier = KvDiskTier::open(directory_.string(), max_bytes, key_named(key), kBlockSize,
                                 kBlockBytes);
    EXPECT_TRUE(tier.ok()) << tier.status().message();
    return tier.ok() ? std::move(*tier) : nullptr;
  }

  // Loads `block` into two separate "layers"; returns whether it loaded and matched.
  static bool load(KvDiskTier& tier, const Block& block) {
    std::vector<uint8_t> first(1000), second(2000);
    std::vector<std::span<uint8_t>> out = {first, second};
    if (!tier.load(block.hash, block.tokens, out)) return false;
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_EQ(first, block.payload);
    return first == block.payload;
  }

  static void store(KvDiskTier& tier, const Block& block) {
    tier.store(block.hash, block.tokens, block.payload);
  }

  std::vector<fs::path> block_files() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(directory_)) {
      if (entry.path().extension() == ".kvb") files.push_back(entry.path());
    }
    return files;
  }

  int64_t directory_bytes() const {
    int64_t bytes = 0;
    for (const auto& entry : fs::directory_iterator(directory_)) bytes += entry.file_size();
    return bytes;
  }

  fs::path directory_;
};

TEST_F(KvDiskTierTest, StoredBlocksLoadBackAcrossReopening) {
  const Block a = make_block(1), b = make_block(2);
  {
    auto tier = open();
    EXPECT_FALSE(tier->contains(a.hash));
    EXPECT_TRUE(tier->wants(a.hash));
    store(*tier, a);
    store(*tier, b);
    tier->flush();
    EXPECT_TRUE(tier->contains(a.hash));
    EXPECT_FALSE(tier->wants(a.hash));
    EXPECT_TRUE(load(*tier, a));
    const KvDiskCounters counters = tier->counters();
    EXPECT_EQ(counters.files, 2);
    EXPECT_EQ(counters.bytes, 2 * kFileBytes);
    EXPECT_EQ(counters.blocks_written, 2u);
    EXPECT_EQ(counters.bytes_written, static_cast<uint64_t>(2 * kFileBytes));
    EXPECT_EQ(counters.blocks_loaded, 1u);
    EXPECT_EQ(counters.bytes_read, static_cast<uint64_t>(kFileBytes));
  }
  auto reopened = open();
  EXPECT_EQ(reopened->counters().files, 2);
  EXPECT_TRUE(load(*reopened, b));
  EXPECT_TRUE(load(*reopened, a));
  EXPECT_FALSE(load(*reopened, make_block(3)));  // never stored
}

TEST_F(KvDiskTierTest, SecondProcessOnTheDirectoryIsRefused) {
  auto tier = open();
  auto second = KvDiskTier::open(directory_.string(), 1 << 20, key_named(1), kBlockSize,
                                 kBlockBytes);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos)
      << second.status().message();
  tier.reset();  // the lock goes with it
  EXPECT_TRUE(KvDiskTier::open(directory_.string(), 1 << 20, key_named(1), kBlockSize,
                               kBlockBytes)
                  .ok());
}

TEST_F(KvDiskTierTest, BadOptionsAreErrors) {
  EXPECT_FALSE(KvDiskTier::open("", 1 << 20, key_named(1), kBlockSize, kBlockBytes).ok());
  EXPECT_FALSE(
      KvDiskTier::open(directory_.string(), 0, key_named(1), kBlockSize, kBlockBytes).ok());
  EXPECT_FALSE(KvDiskTier::open("/proc/no/such/place", 1 << 20, key_named(1), kBlockSize,
                                kBlockBytes)
                   .ok());
}

// Every kind of damage is found, the file deleted and counted; the block is then a miss.
TEST_F(KvDiskTierTest, DamagedFilesAreRejectedAndDeleted) {
  auto tier = open();
  std::vector<Block> blocks;
  for (int i = 0; i < 5; ++i) {
    blocks.push_back(make_block(i));
    store(*tier, blocks.back());
  }
  tier->flush();
  // Which file is which: each block's file is the only one that loads it.
  auto file_of = [&](const Block& block) {
    for (const fs::path& path : block_files()) {
      std::ifstream in(path, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
      // The block hash follows the magic, sizes and key (offset 56).
      if (bytes.size() >= 128 &&
          std::memcmp(bytes.data() + 56, block.hash.bytes.data(), block.hash.bytes.size()) == 0) {
        return path;
      }
    }
    ADD_FAILURE() << "no file for the block";
    return fs::path();
  };
  auto flip_byte = [](const fs::path& path, int64_t offset) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(offset);
    char byte = 0;
    file.read(&byte, 1);
    byte ^= 0x40;
    file.seekp(offset);
    file.write(&byte, 1);
  };
  flip_byte(file_of(blocks[0]), kFileBytes - 7);             // payload
  flip_byte(file_of(blocks[1]), 128 + 2);                    // a token
  fs::resize_file(file_of(blocks[2]), kFileBytes - 100);     // truncated
  fs::copy_file(file_of(blocks[4]), file_of(blocks[3]),      // another block's file
                fs::copy_options::overwrite_existing);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(load(*tier, blocks[i])) << "block " << i;
  EXPECT_TRUE(load(*tier, blocks[4]));
  EXPECT_EQ(tier->counters().files_rejected, 4u);
  EXPECT_EQ(tier->counters().files, 1);
  EXPECT_EQ(block_files().size(), 1u);
  EXPECT_FALSE(tier->contains(blocks[0].hash));
  // A rejected block may be written again.
  EXPECT_TRUE(tier->wants(blocks[0].hash));
  store(*tier, blocks[0]);
  tier->flush();
  EXPECT_TRUE(load(*tier, blocks[0]));
}

TEST_F(KvDiskTierTest, FilesOfAnotherModelAreNeverUsed) {
  const Block block = make_block(7);
  {
    auto model_a = open(1 << 20, /*key=*/1);
    store(*model_a, block);
    model_a->flush();
  }
  const fs::path a_file = block_files().at(0);
  auto model_b = open(1 << 20, /*key=*/2);
  EXPECT_FALSE(model_b->contains(block.hash));  // another key, another name
  EXPECT_FALSE(load(*model_b, block));
  store(*model_b, block);
  model_b->flush();
  // Model A's file put where model B looks for the block.
  fs::path b_file;
  for (const fs::path& path : block_files()) {
    if (path != a_file) b_file = path;
  }
  ASSERT_FALSE(b_file.empty());
  fs::copy_file(a_file, b_file, fs::copy_options::overwrite_existing);
  EXPECT_FALSE(load(*model_b, block));
  EXPECT_EQ(model_b->counters().files_rejected, 1u);
}

TEST_F(KvDiskTierTest, LeastRecentlyUsedFilesGoFirstAndTheSizeHolds) {
  const int64_t max_bytes = 3 * kFileBytes + 10;
  auto tier = open(max_bytes);
  std::vector<Block> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(make_block(i));
    store(*tier, blocks.back());
    tier->flush();
  }
  EXPECT_TRUE(load(*tier, blocks[0]));  // 1 is now the least recently used
  blocks.push_back(make_block(3));
  store(*tier, blocks.back());
  tier->flush();
  EXPECT_TRUE(tier->contains(blocks[0].hash));
  EXPECT_FALSE(tier->contains(blocks[1].hash));
  EXPECT_TRUE(tier->contains(blocks[2].hash));
  EXPECT_TRUE(tier->contains(blocks[3].hash));
  EXPECT_EQ(tier->counters().files_evicted, 1u);
  EXPECT_LE(directory_bytes(), max_bytes);
  for (int i = 4; i < 20; ++i) {
    store(*tier, make_block(i));
    tier->flush();
    EXPECT_LE(directory_bytes(), max_bytes);
  }
  EXPECT_EQ(tier->counters().files, 3);
}

TEST_F(KvDiskTierTest, ReopeningWithASmallerLimitEvictsTheOldest) {
  {
    auto tier = open();
    for (int i = 0; i < 4; ++i) {
      store(*tier, make_block(i));
      tier->flush();
      usleep(20'000);  // distinct modification times (the kernel's clock ticks)
    }
  }
  auto tier = open(2 * kFileBytes);
  EXPECT_EQ(tier->counters().files, 2);
  EXPECT_FALSE(tier->contains(make_block(0).hash));
  EXPECT_FALSE(tier->contains(make_block(1).hash));
  EXPECT_TRUE(load(*tier, make_block(2)));
  EXPECT_TRUE(load(*tier, make_block(3)));
}

// A crash mid-write leaves a temporary file: never used, deleted on the next open.
TEST_F(KvDiskTierTest, TemporaryFilesFromACrashAreDeleted) {
  const Block block = make_block(5);
  {
    auto tier = open();
    store(*tier, block);
    tier->flush();
  }
  const fs::path file = block_files().at(0);
  fs::rename(file, file.string() + ".tmp");  // as if killed before the rename
  std::ofstream(directory_ / "0123.kvb.tmp") << "half a block";
  auto tier = open();
  EXPECT_FALSE(load(*tier, block));
  EXPECT_EQ(tier->counters().files, 0);
  for (const auto& entry : fs::directory_iterator(directory_)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
}

TEST_F(KvDiskTierTest, ABlockLargerThanTheLimitIsNotWritten) {
  auto tier = open(kFileBytes - 1);
  store(*tier, make_block(1));
  tier->flush();
  EXPECT_EQ(tier->counters().files, 0);
  EXPECT_EQ(tier->counters().writes_dropped, 1u);
}

}  // namespace
}  // namespace tachyon
