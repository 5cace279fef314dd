// The contiguous KV cache: rows stored as f16 or f32 come back as written (f16: rounded once),
// whole heads or spans of positions with the keys transposed for the attention kernels.
#include "kv_cache/kv_cache.h"

#include <string>
#include <tuple>

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kv_cache/kv_cache_type.h"
#include "kv_cache/paged_kv_cache.h"

namespace tachyon {
namespace {

// `data` as a cache of `type` stores it: f16 rounds each value, q8 each run of 32 (rows of whole
// heads of a multiple of 32 values), f32 keeps it.
std::vector<float> as_stored(DType type, std::vector<float> data) {
  if (type == DType::kF16) {
    for (float& x : data) x = round_to_f16(x);
  } else if (type == DType::kQ8_0) {
    std::vector<int8_t> q(data.size());
    std::vector<uint16_t> scales(data.size() / kernels::kQ8Group);
    kernels::f32_to_q8_row(data.data(), q.data(), scales.data(), static_cast<int64_t>(data.size()));
    kernels::q8_to_f32_row(q.data(), scales.data(), data.data(), static_cast<int64_t>(data.size()));
  }
  return data;
}

TEST(KvCacheTest, SpansMatchWholeHeadsTransposed) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    // Heads of a usual and of an odd, wide size (q8: whole groups of 32 values).
    for (int head_size : {64, 300}) {
      if (type == DType::kQ8_0 && head_size % 32 != 0) continue;
      const int num_kv_heads = 2;
      const int kv_size = num_kv_heads * head_size;
      // Past one key block (KvCache::kKeyBlock positions), not a whole number of them.
      const int capacity = 300;
      KvCache cache(3, num_kv_heads, head_size, capacity, type);
      std::vector<float> keys(static_cast<size_t>(capacity) * kv_size);
      std::vector<float> values(keys.size());
      for (float& x : keys) x = normal(rng);
      for (float& x : values) x = normal(rng);
      // Stores that start and end inside blocks and cross from one to the next, each after
      // prefetching its lines (which must not change what is stored or read).
      auto store = [&](int position, int count) {
        cache.prefetch_store(2, position, count);
        cache.store(2, position, count, keys.data() + position * kv_size,
                    values.data() + position * kv_size);
      };
      store(0, 30);
      store(30, 170);
      store(200, 1);
      store(201, capacity - 201);
      cache.prefetch_store(2, capacity - 1, 1);  // the last line of the cache
      cache.prefetch_store(0, 0, capacity);
      const std::vector<float> stored_keys_f32 = as_stored(type, keys);
      const std::vector<float> stored_values_f32 = as_stored(type, values);
      for (int kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
        std::vector<float> head_keys(static_cast<size_t>(capacity) * head_size);
        std::vector<float> head_values(head_keys.size());
        cache.load_head(2, kv_head, head_size, capacity, head_keys.data(), head_values.data());
        for (int p = 0; p < capacity; ++p) {
          for (int d = 0; d < head_size; ++d) {
            const size_t i = static_cast<size_t>(p) * kv_size + kv_head * head_size + d;
            ASSERT_EQ(head_keys[static_cast<size_t>(p) * head_size + d], stored_keys_f32[i]);
            ASSERT_EQ(head_values[static_cast<size_t>(p) * head_size + d], stored_values_f32[i]);
          }
        }
        // The layout kernels read in place (f16 only): key blocks transposed, value rows.
        if (type == DType::kF16) {
          const uint16_t* stored_keys = cache.f16_keys(2, kv_head);
          const uint16_t* stored_values = cache.f16_values(2, kv_head);
          const int block = KvCache::kKeyBlock;
          for (int p = 0; p < capacity; ++p) {
            for (int d = 0; d < head_size; ++d) {
              const size_t i = static_cast<size_t>(p) * kv_size + kv_head * head_size + d;
              const size_t key_at = (static_cast<size_t>(p / block) * head_size + d) * block +
                                    p % block;
              ASSERT_EQ(stored_keys[key_at], f32_to_f16(keys[i]));
              ASSERT_EQ(stored_values[static_cast<size_t>(p) * head_size + d],
                        f32_to_f16(values[i]));
            }
          }
        }
        // q8: int8 values in the f16 layout, scales per 32 dimensions beside them, each value
        // reading back as q * scale.
        if (type == DType::kQ8_0) {
          const Q8Plane stored_keys = cache.q8_keys(2, kv_head);
          const Q8Plane stored_values = cache.q8_values(2, kv_head);
          const int block = KvCache::kKeyBlock;
          const int groups = head_size / 32;
          for (int p = 0; p < capacity; ++p) {
            for (int d = 0; d < head_size; ++d) {
              const size_t i = static_cast<size_t>(p) * kv_size + kv_head * head_size + d;
              // Keys in rows of 4 dimensions, each position's 4 bytes together.
              const size_t key_at = static_cast<size_t>(p / block) * head_size * block +
                                    kernels::q8_key_index(p % block, d, block);
              const size_t key_scale_at =
                  (static_cast<size_t>(p / block) * groups + d / 32) * block + p % block;
              ASSERT_EQ(static_cast<float>(stored_keys.data[key_at]) *
                            f16_to_f32(stored_keys.scales[key_scale_at]),
                        stored_keys_f32[i]);
              const size_t value_at = static_cast<size_t>(p) * head_size + d;
              ASSERT_EQ(static_cast<float>(stored_values.data[value_at]) *
                            f16_to_f32(stored_values.scales[value_at / 32]),
                        stored_values_f32[i]);
            }
          }
        }
        // A span across a block boundary.
        const int first = 100;
        const int count = 150;
        const int64_t stride = 160;
        std::vector<float> span_keys(static_cast<size_t>(head_size) * stride, -1.0f);
        std::vector<float> span_values(static_cast<size_t>(count) * head_size);
        cache.load_span(2, kv_head, head_size, first, count, span_keys.data(), stride,
                        span_values.data());
        for (int p = 0; p < count; ++p) {
          for (int d = 0; d < head_size; ++d) {
            ASSERT_EQ(span_keys[d * stride + p],
                      head_keys[static_cast<size_t>(first + p) * head_size + d]);
            ASSERT_EQ(span_values[static_cast<size_t>(p) * head_size + d],
                      head_values[static_cast<size_t>(first + p) * head_size + d]);
          }
        }
        // Columns past `count` are left alone.
        for (int d = 0; d < head_size; ++d) {
          for (int p = count; p < stride; ++p) ASSERT_EQ(span_keys[d * stride + p], -1.0f);
        }
      }
    }
  }
}

// A layer's positions stored one at a time by two threads at once (as a forward pass stores
// each token right after its RoPE) hold the same bytes as one store of them all: the f16
// staging is per thread, and neighbouring positions share key blocks without clobbering.
// Dropping positions from the middle moves the later ones down, their keys through the
// adjustment (here: + 1) and their values as they were; earlier positions stay.
TEST(KvCacheTest, DropPositionsMovesTheRestDown) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int layers = 2, heads = 2, head_size = 64, capacity = 400, length = 333;
  const int first = 4, count = 130;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    for (bool values_are_keys : {false, true}) {
      SCOPED_TRACE(std::string(kv_cache_type_name(type)) + (values_are_keys ? " latent" : ""));
      KvCache cache(layers, heads, head_size, capacity, type, values_are_keys);
      const int kv = heads * head_size;
      std::vector<std::vector<float>> keys(layers), values(layers);
      for (int layer = 0; layer < layers; ++layer) {
        keys[layer].resize(static_cast<size_t>(length) * kv);
        values[layer].resize(keys[layer].size());
        for (float& x : keys[layer]) x = normal(rng);
        for (float& x : values[layer]) x = normal(rng);
        keys[layer] = as_stored(type, keys[layer]);
        values[layer] = values_are_keys ? keys[layer] : as_stored(type, values[layer]);
        cache.store(layer, 0, length, keys[layer].data(), values[layer].data());
      }
      int adjusted = 0;
      cache.drop_positions(first, count, length, [&](float* rows, int n, int) {
        for (int64_t i = 0; i < static_cast<int64_t>(n) * kv; ++i) rows[i] += 1.0f;
        adjusted += n;
      });
      EXPECT_EQ(adjusted, layers * (length - first - count));
      const int kept = length - count;
      for (int layer = 0; layer < layers; ++layer) {
        for (int head = 0; head < heads; ++head) {
          std::vector<float> k(static_cast<size_t>(kept) * head_size), v(k.size());
          cache.load_head(layer, head, head_size, kept, k.data(), v.data());
          int mismatches = 0;
          for (int p = 0; p < kept; ++p) {
            const int from = p < first ? p : p + count;
            const bool moved = p >= first;
            for (int d = 0; d < head_size; ++d) {
              const size_t at = static_cast<size_t>(from) * kv + head * head_size + d;
              const float want_key = moved ? keys[layer][at] + 1.0f : keys[layer][at];
              const float want_value = values_are_keys ? want_key : values[layer][at];
              const float got_key = k[static_cast<size_t>(p) * head_size + d];
              const float got_value = v[static_cast<size_t>(p) * head_size + d];
              // f16/q8 keys are rounded again after the + 1.
              const float tolerance =
                  type == DType::kF32 ? 0.0f : type == DType::kF16 ? 2e-3f : 0.05f;
              mismatches += std::abs(got_key - want_key) > tolerance;
              mismatches += std::abs(got_value - want_value) > (values_are_keys ? tolerance : 0);
            }
          }
          EXPECT_EQ(mismatches, 0) << "layer " << layer << " head " << head;
        }
      }
    }
  }
}

TEST(KvCacheTest, ThreadsStoringDisjointPositionsAtOnce) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    const int num_kv_heads = 3;
    const int head_size = 64;
    const int kv_size = num_kv_heads * head_size;
    const int capacity = 2 * KvCache::kKeyBlock + 40;
    KvCache together(1, num_kv_heads, head_size, capacity, type);
    KvCache apart(1, num_kv_heads, head_size, capacity, type);
    std::vector<float> keys(static_cast<size_t>(capacity) * kv_size);
    std::vector<float> values(keys.size());
    for (float& x : keys) x = normal(rng);
    for (float& x : values) x = normal(rng);
    together.store(0, 0, capacity, keys.data(), values.data());
    ThreadPool pool(2);
    pool.run([&](int thread, int threads) {
      for (int p = thread; p < capacity; p += threads) {  // interleaved: shared key blocks
        apart.store(0, p, 1, keys.data() + p * kv_size, values.data() + p * kv_size);
      }
    });
    for (int h = 0; h < num_kv_heads; ++h) {
      std::vector<float> expected_keys(static_cast<size_t>(capacity) * head_size);
      std::vector<float> expected_values(expected_keys.size());
      std::vector<float> stored_keys(expected_keys.size());
      std::vector<float> stored_values(expected_keys.size());
      together.load_head(0, h, head_size, capacity, expected_keys.data(), expected_values.data());
      apart.load_head(0, h, head_size, capacity, stored_keys.data(), stored_values.data());
      EXPECT_EQ(stored_keys, expected_keys) << dtype_name(type) << " head " << h;
      EXPECT_EQ(stored_values, expected_values) << dtype_name(type) << " head " << h;
    }
  }
}

// Tokens stored into blocks slot by slot, after prefetching their lines, read back as written.
TEST(PagedKvCacheTest, PrefetchedStoresReadBack) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    const int num_kv_heads = 2;
    // Rows of values not a whole number of lines (q8: whole groups of 32).
    const int head_size = type == DType::kQ8_0 ? 96 : 72;
    const int kv_size = num_kv_heads * head_size;
    const int block_size = 16;
    auto created = PagedKvCache::create(2, num_kv_heads, head_size, 4, block_size, type);
    ASSERT_TRUE(created.ok()) << created.status().message();
    PagedKvCache& cache = **created;
    // Three tokens: the first and last slots of the last block, one in block 1.
    const std::vector<int64_t> slots = {4 * block_size - 1, 3 * block_size, block_size + 5};
    std::vector<float> keys(slots.size() * kv_size);
    std::vector<float> values(keys.size());
    for (float& x : keys) x = normal(rng);
    for (float& x : values) x = normal(rng);
    cache.prefetch_store(1, slots);
    cache.store(1, slots, keys.data(), values.data());
    const std::vector<float> stored_keys = as_stored(type, keys);
    const std::vector<float> stored_values = as_stored(type, values);
    for (size_t i = 0; i < slots.size(); ++i) {
      const int block = static_cast<int>(slots[i] / block_size);
      const int offset = static_cast<int>(slots[i] % block_size);
      for (int h = 0; h < num_kv_heads; ++h) {
        std::vector<float> block_keys(static_cast<size_t>(head_size) * block_size);
        std::vector<float> block_values(block_keys.size());
        cache.load_block(1, h, block, block_size, block_keys.data(), block_size,
                         block_values.data());
        for (int d = 0; d < head_size; ++d) {
          const size_t at = i * kv_size + h * head_size + d;
          ASSERT_EQ(block_keys[static_cast<size_t>(d) * block_size + offset], stored_keys[at]);
          ASSERT_EQ(block_values[static_cast<size_t>(offset) * head_size + d],
                    stored_values[at]);
        }
      }
    }
  }
}

// MLA's latent serves as key and value: a cache that stores it once takes half the memory and
// reads each position's value back as its key, in both caches and both types.
// A paged block copied, then its keys rewritten (here: + 1): the copy's keys changed in its
// first `count` slots, its values as they were, the original untouched.
TEST(PagedKvCacheTest, CopiedBlockKeysRewrittenInPlace) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  const int layers = 2, heads = 2, head_size = 64, block_size = 16, count = 11;
  const int kv = heads * head_size;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    SCOPED_TRACE(std::string(kv_cache_type_name(type)));
    auto cache = PagedKvCache::create(layers, heads, head_size, 4, block_size, type);
    ASSERT_TRUE(cache.ok());
    std::vector<int64_t> slots(block_size);
    for (int i = 0; i < block_size; ++i) slots[i] = block_size + i;  // block 1
    std::vector<std::vector<float>> keys(layers), values(layers);
    for (int layer = 0; layer < layers; ++layer) {
      keys[layer].resize(static_cast<size_t>(block_size) * kv);
      values[layer].resize(keys[layer].size());
      for (float& x : keys[layer]) x = normal(rng);
      for (float& x : values[layer]) x = normal(rng);
      keys[layer] = as_stored(type, keys[layer]);
      values[layer] = as_stored(type, values[layer]);
      (*cache)->store(layer, slots, keys[layer].data(), values[layer].data());
    }
    (*cache)->copy_block(1, 3);
    int rows = 0;
    (*cache)->rewrite_keys(3, count, false, [&](float* k, int n, int) {
      for (int64_t i = 0; i < static_cast<int64_t>(n) * kv; ++i) k[i] += 1.0f;
      rows += n;
    });
    EXPECT_EQ(rows, layers * count);
    const float tolerance = type == DType::kF32 ? 0.0f : type == DType::kF16 ? 2e-3f : 0.05f;
    for (int layer = 0; layer < layers; ++layer) {
      for (int head = 0; head < heads; ++head) {
        for (int block : {1, 3}) {
          std::vector<float> by_dimension(static_cast<size_t>(head_size) * block_size);
          std::vector<float> v(static_cast<size_t>(block_size) * head_size);
          (*cache)->load_block(layer, head, block, block_size, by_dimension.data(), block_size,
                               v.data());
          int mismatches = 0;
          for (int p = 0; p < block_size; ++p) {
            for (int d = 0; d < head_size; ++d) {
              const size_t at = static_cast<size_t>(p) * kv + head * head_size + d;
              const float shift = block == 3 && p < count ? 1.0f : 0.0f;
              mismatches += std::abs(by_dimension[static_cast<size_t>(d) * block_size + p] -
                                     (keys[layer][at] + shift)) > (shift ? tolerance : 0.0f);
              mismatches += v[static_cast<size_t>(p) * head_size + d] != values[layer][at];
            }
          }
          EXPECT_EQ(mismatches, 0) << "layer " << layer << " head " << head << " block " << block;
        }
      }
    }
  }
}

TEST(PagedKvCacheTest, ValuesThatAreTheKeysAreStoredOnce) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    // A tiny latent of 32 + 8 (q8: of 32 + 32).
    const int head_size = type == DType::kQ8_0 ? 64 : 40;
    const int block_size = 16;
    EXPECT_EQ(PagedKvCache::block_bytes(3, head_size, block_size, type, true) * 2,
              PagedKvCache::block_bytes(3, head_size, block_size, type, false));
    auto created = PagedKvCache::create(3, 1, head_size, 4, block_size, type, true);
    ASSERT_TRUE(created.ok()) << created.status().message();
    PagedKvCache& paged = **created;
    EXPECT_TRUE(paged.values_are_keys());
    KvCache single(3, 1, head_size, 70, type, /*values_are_keys=*/true);
    EXPECT_EQ(single.bytes() * 2, KvCache(3, 1, head_size, 70, type).bytes());
    std::vector<float> latents(static_cast<size_t>(70) * head_size);
    for (float& x : latents) x = normal(rng);
    std::vector<int64_t> slots(block_size * 2);
    for (int i = 0; i < 2 * block_size; ++i) slots[i] = 2 * block_size + i;  // blocks 2 and 3
    paged.store(2, slots, latents.data(), nullptr);
    single.store(2, 0, 70, latents.data(), nullptr);
    const std::vector<float> stored_latents = as_stored(type, latents);
    auto stored = [&](int p, int d) { return stored_latents[static_cast<size_t>(p) * head_size + d]; };
    std::vector<float> keys(static_cast<size_t>(head_size) * block_size);
    std::vector<float> values(keys.size());
    paged.load_block(2, 0, 3, block_size, keys.data(), block_size, values.data());
    for (int p = 0; p < block_size; ++p) {
      for (int d = 0; d < head_size; ++d) {
        ASSERT_EQ(keys[static_cast<size_t>(d) * block_size + p], stored(block_size + p, d));
        ASSERT_EQ(values[static_cast<size_t>(p) * head_size + d], stored(block_size + p, d));
      }
    }
    std::vector<float> span_keys(static_cast<size_t>(head_size) * 64);
    std::vector<float> span_values(span_keys.size());
    single.load_span(2, 0, head_size, 5, 60, span_keys.data(), 64, span_values.data());
    std::vector<float> head_keys(latents.size());
    std::vector<float> head_values(latents.size());
    single.load_head(2, 0, head_size, 70, head_keys.data(), head_values.data());
    for (int p = 0; p < 60; ++p) {
      for (int d = 0; d < head_size; ++d) {
        ASSERT_EQ(span_keys[static_cast<size_t>(d) * 64 + p], stored(5 + p, d));
        ASSERT_EQ(span_values[static_cast<size_t>(p) * head_size + d], stored(5 + p, d));
        ASSERT_EQ(head_values[static_cast<size_t>(5 + p) * head_size + d], stored(5 + p, d));
      }
    }
  }
}

// q8 takes 34 bytes per 32 values (f16: 64) and only heads of whole groups of 32: others are
// refused with an error that names both sizes, never a crash.
TEST(PagedKvCacheTest, Q8HalvesTheBytesAndRefusesOddHeads) {
  EXPECT_EQ(PagedKvCache::block_bytes(30, 192, 16, DType::kQ8_0) * 64,
            PagedKvCache::block_bytes(30, 192, 16, DType::kF16) * 34);
  EXPECT_EQ(KvCache(2, 3, 64, 256, DType::kQ8_0).bytes() * 64,
            KvCache(2, 3, 64, 256, DType::kF16).bytes() * 34);
  auto odd = PagedKvCache::create(2, 1, 40, 4, 16, DType::kQ8_0);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(odd.status().message().find("multiple of 32 values; this model's hold 40"),
            std::string::npos)
      << odd.status().message();
  EXPECT_TRUE(check_kv_cache_type(DType::kQ8_0, 576).ok());  // DeepSeek's latent + RoPE keys
  ASSERT_TRUE(parse_kv_cache_type("q8").ok());
  EXPECT_EQ(*parse_kv_cache_type("q8"), DType::kQ8_0);
  EXPECT_FALSE(parse_kv_cache_type("q4").ok());
  EXPECT_EQ(kv_cache_type_name(DType::kQ8_0), "q8");
}

TEST(PagedKvCacheTest, TooLargeACacheIsAnErrorNotACrash) {
  // 2^30 blocks of 1024 tokens of 8192-wide f16 rows, 80 layers: far more than any machine maps
  // (~2.9e18 bytes); and 2^31 - 1 blocks of a 64 GiB each, past size_t.
  for (auto [layers, blocks, block_size] : {std::tuple{80, 1 << 30, 1024},
                                            std::tuple{4096, 0x7fffffff, 1 << 16}}) {
    auto cache = PagedKvCache::create(layers, 64, 128, blocks, block_size, DType::kF16);
    ASSERT_FALSE(cache.ok());
    EXPECT_EQ(cache.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(cache.status().message().find("cannot allocate"), std::string::npos)
        << cache.status().message();
  }
  // A usual one still comes, zeroed where it is read first.
  auto small = PagedKvCache::create(2, 2, 64, 8, 16, DType::kF16);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_EQ((*small)->f16_keys(1, 7, 1)[0], 0);
}

}  // namespace
}  // namespace tachyon
