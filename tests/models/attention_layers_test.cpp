// The two attention layers agree bit for bit: paged_attention over a batch of sequences whose
// blocks lie anywhere in a paged cache gives each token exactly what causal_attention gives it
// over the same sequence in a contiguous cache, for prompt chunks (whose blocks are widened once
// per call) and single decode tokens alike, mixed in one batch or alone; f16 and q8 caches read
// in place or widened alike, with and without sliding windows; exact (f32) caches match softmax
// attention written out in double. And q8 caches stay within their rounding of exact ones.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kv_cache/kv_cache.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/forward_batch.h"
#include "models/layers.h"

namespace tachyon {
namespace {

struct SequenceCase {
  int context;         // positions in the cache once this step's tokens are stored
  int start_position;  // of this step's first token
};

// Softmax attention written out in double, position by position (a sliding window limits the
// positions each token sees): an exact cache's output stays within f32 rounding of it.
void expect_naive_attention(const AttentionShape& shape, const float* queries, int start_position,
                            int context, const std::vector<float>& keys,
                            const std::vector<float>& values, const std::vector<float>& out) {
  const int kv_size = shape.num_kv_heads * shape.head_size;
  const int q_size = shape.num_heads * shape.head_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  for (int p = start_position; p < context; ++p) {
    const int first = shape.window > 0 ? std::max(0, p - shape.window + 1) : 0;
    for (int h = 0; h < shape.num_heads; ++h) {
      const float* q = queries + static_cast<size_t>(p - start_position) * q_size + h * shape.head_size;
      const int kv_offset = (h / group) * shape.head_size;
      std::vector<double> scores;
      double top = -1e300;
      for (int k = first; k <= p; ++k) {
        double dot = 0;
        for (int d = 0; d < shape.head_size; ++d) {
          dot += static_cast<double>(q[d]) * keys[static_cast<size_t>(k) * kv_size + kv_offset + d];
        }
        scores.push_back(dot * shape.scale);
        top = std::max(top, scores.back());
      }
      double sum = 0;
      for (double& score : scores) sum += (score = std::exp(score - top));
      for (int d = 0; d < shape.head_size; ++d) {
        double value = 0;
        for (int k = first; k <= p; ++k) {
          value += scores[k - first] * values[static_cast<size_t>(k) * kv_size + kv_offset + d];
        }
        const float got = out[static_cast<size_t>(p - start_position) * q_size + h * shape.head_size + d];
        ASSERT_NEAR(got, value / sum, 2e-5) << "position " << p << " head " << h << " window "
                                            << shape.window;
      }
    }
  }
}

// The data depend only on the shape and cases (not the type); `paged_result`, if given, receives
// paged_attention's output. `values_are_keys`: caches that store each position's key once as
// its value too (MLA's latent).
void check_batch(const AttentionShape& shape, DType cache_type,
                 const std::vector<SequenceCase>& cases, int threads,
                 std::vector<float>* paged_result = nullptr, bool values_are_keys = false) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int kv_size = shape.num_kv_heads * shape.head_size;
  const int q_size = shape.num_heads * shape.head_size;
  constexpr int kBlockSize = 16;
  constexpr int kLayers = 2;
  constexpr int kLayer = 1;
  int total_blocks = 0;
  for (const SequenceCase& c : cases) total_blocks += (c.context + kBlockSize - 1) / kBlockSize;
  auto paged = PagedKvCache::create(kLayers, shape.num_kv_heads, shape.head_size, total_blocks,
                                    kBlockSize, cache_type, values_are_keys);
  ASSERT_TRUE(paged.ok());
  // Blocks handed out in a shuffled order, so no sequence's blocks are contiguous.
  std::vector<int> free_blocks(total_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  ForwardBatch batch;
  batch.block_size = kBlockSize;
  std::vector<std::vector<float>> keys(cases.size()), values(cases.size());
  std::vector<float> queries;
  for (size_t s = 0; s < cases.size(); ++s) {
    const SequenceCase& c = cases[s];
    BatchSequence sequence;
    sequence.first_token = batch.num_tokens();
    sequence.num_tokens = c.context - c.start_position;
    sequence.start_position = c.start_position;
    for (int b = 0; b < (c.context + kBlockSize - 1) / kBlockSize; ++b) {
      sequence.block_table.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    keys[s].resize(static_cast<size_t>(c.context) * kv_size);
    values[s].resize(keys[s].size());
    for (float& x : keys[s]) x = normal(rng);
    for (float& x : values[s]) x = normal(rng);
    if (values_are_keys) values[s] = keys[s];
    std::vector<int64_t> slots;
    for (int p = 0; p < c.context; ++p) {
      slots.push_back(static_cast<int64_t>(sequence.block_table[p / kBlockSize]) * kBlockSize +
                      p % kBlockSize);
    }
    (*paged)->store(kLayer, slots, keys[s].data(), values[s].data());
    for (int p = c.start_position; p < c.context; ++p) {
      batch.tokens.push_back(0);
      batch.positions.push_back(p);
      batch.slots.push_back(slots[p]);
      for (int i = 0; i < q_size; ++i) queries.push_back(normal(rng) * 2.0f);
    }
    batch.sequences.push_back(std::move(sequence));
  }

  ThreadPool pool(threads);
  std::vector<float> paged_out(queries.size());
  paged_attention(shape, queries.data(), batch, **paged, kLayer, paged_out.data(), pool);
  if (paged_result != nullptr) *paged_result = paged_out;

  for (size_t s = 0; s < cases.size(); ++s) {
    const SequenceCase& c = cases[s];
    const BatchSequence& sequence = batch.sequences[s];
    KvCache contiguous(kLayers, shape.num_kv_heads, shape.head_size, c.context, cache_type,
                       values_are_keys);
    contiguous.store(kLayer, 0, c.context, keys[s].data(), values[s].data());
    std::vector<float> out(static_cast<size_t>(sequence.num_tokens) * q_size);
    causal_attention(shape, queries.data() + static_cast<size_t>(sequence.first_token) * q_size,
                     sequence.num_tokens, c.start_position, contiguous, kLayer, out.data(), pool);
    const float* batch_rows = paged_out.data() + static_cast<size_t>(sequence.first_token) * q_size;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i]));
    }
    EXPECT_EQ(0, std::memcmp(out.data(), batch_rows, out.size() * sizeof(float)))
        << "sequence " << s << " (context " << c.context << ", start " << c.start_position
        << ") threads " << threads;
    if (cache_type == DType::kF32) {
      expect_naive_attention(shape, queries.data() + static_cast<size_t>(sequence.first_token) * q_size,
                             c.start_position, c.context, keys[s], values[s], out);
    }
  }
}

TEST(AttentionLayersTest, PagedBatchMatchesCausalAttentionPerSequence) {
  const AttentionShape shape{9, 3, 64, 0.125f};
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    for (int threads : {1, 2, 3}) {
      // A long prompt chunk after a cached prefix, a decode token, a short prompt from 0, a
      // chunk that ends mid-block, and another decode token deep in its context.
      check_batch(shape, type, {{300, 100}, {58, 57}, {20, 0}, {37, 5}, {260, 259}}, threads);
    }
  }
}

// A batch of one run (a lone sequence decoding, or a short chunk) splits its query heads
// between the threads, a KV head's rows between two; f16 caches are read in place.
TEST(AttentionLayersTest, SingleRunBatches) {
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    for (int threads : {1, 2, 3, 4}) {
      check_batch(AttentionShape{9, 3, 64, 0.125f}, type, {{700, 699}}, threads);
      check_batch(AttentionShape{9, 3, 64, 0.125f}, type, {{270, 258}}, threads);
      if (type == DType::kQ8_0) {  // heads of whole groups of 32 values only
        check_batch(AttentionShape{4, 4, 96, 0.1f}, type, {{129, 128}}, threads);
        continue;
      }
      check_batch(AttentionShape{4, 4, 40, 0.15f}, type, {{129, 128}}, threads);
      check_batch(AttentionShape{16, 2, 80, 0.11f}, type, {{17, 16}}, threads);
    }
  }
}

// Every attention path over a q8 cache (decode tokens and prompt chunks, all read in place, a
// chunk after a cached prefix) against the same data in an exact f32 cache: each output value
// (a softmax-weighted mean of unit-normal values, scores from queries of scale 2) within 0.12,
// and on average within 0.006: int8 with a scale per 32 values rounds each key and value by up
// to max|x| / 254 (about 0.015 here), the query is rounded so too for the integer scores, and
// a token seeing few positions moves with their scores (measured: worst 0.060, mean 0.0030).
// f16 for comparison stays within 0.002.
TEST(AttentionLayersTest, Q8StaysWithinItsRoundingOfF32) {
  const AttentionShape shape{9, 3, 64, 0.125f};
  const std::vector<SequenceCase> cases = {{300, 100}, {58, 57}, {20, 0}, {260, 259}};
  std::vector<float> exact, rounded, half;
  check_batch(shape, DType::kF32, cases, 2, &exact);
  check_batch(shape, DType::kQ8_0, cases, 2, &rounded);
  check_batch(shape, DType::kF16, cases, 2, &half);
  ASSERT_EQ(exact.size(), rounded.size());
  double worst = 0, total = 0, worst_f16 = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(rounded[i] - exact[i])));
    total += std::fabs(rounded[i] - exact[i]);
    worst_f16 = std::max(worst_f16, static_cast<double>(std::fabs(half[i] - exact[i])));
  }
  const double mean = total / static_cast<double>(exact.size());
  EXPECT_LT(worst, 0.12);
  EXPECT_LT(mean, 0.006);
  EXPECT_LT(worst_f16, 0.002);
  EXPECT_GT(worst, worst_f16);  // the comparison sees the rounding at all
  std::printf("q8 vs f32: worst %.5f mean %.6f (f16 worst %.6f)\n", worst, mean, worst_f16);
}

// MLA's latent cache (each position's latent stored once, its key and its value; every query
// head on one KV head of 576): paged == contiguous bit for bit in every path and type, the
// exact cache against double attention, and q8 (scores from integer dot products with the
// latent as stored, values read from the same int8s) within its rounding of the exact cache
// (measured: worst 0.095, mean 0.0065; more than the 64-wide heads' above: each score sums
// the rounding of 576 dimensions).
TEST(AttentionLayersTest, LatentCachesReadTheirValuesFromTheKeys) {
  const AttentionShape shape{16, 1, 576, 0.0722f};
  const std::vector<SequenceCase> cases = {{150, 40}, {58, 57}, {20, 0}, {140, 139}};
  std::vector<float> exact, rounded;
  for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
    for (int threads : {1, 2}) {
      std::vector<float>* result = threads == 1 ? nullptr
                                   : type == DType::kF32 ? &exact
                                   : type == DType::kQ8_0 ? &rounded : nullptr;
      check_batch(shape, type, cases, threads, result, true);
      check_batch(shape, type, {{300, 299}}, threads, nullptr, true);  // a lone decode
    }
  }
  ASSERT_EQ(exact.size(), rounded.size());
  double worst = 0, total = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(rounded[i] - exact[i])));
    total += std::fabs(rounded[i] - exact[i]);
  }
  const double mean = total / static_cast<double>(exact.size());
  EXPECT_LT(worst, 0.12);
  EXPECT_LT(mean, 0.01);
  EXPECT_GT(worst, 0.0);
  std::printf("latent q8 vs f32: worst %.5f mean %.6f\n", worst, mean);
}

// Sliding windows (Gemma 3's local layers, Mistral): each token sees only its last `window`
// positions, the window starting anywhere in a span or block (its tail folded alone on widened
// keys in every path), in prompt chunks and decode steps, alone or batched, f16 and q8 read in
// place or widened: still bit for bit the contiguous cache's result, and the exact one.
TEST(AttentionLayersTest, SlidingWindowsSeeOnlyTheirWindow) {
  for (int window : {1, 16, 50, 128, 129, 200}) {
    const AttentionShape shape{4, 2, 64, 0.125f, window};
    for (DType type : {DType::kF16, DType::kF32, DType::kQ8_0}) {
      for (int threads : {1, 2}) {
        check_batch(shape, type, {{300, 100}, {58, 57}, {20, 0}, {37, 5}, {400, 399}}, threads);
        check_batch(shape, type, {{700, 699}}, threads);
        check_batch(shape, type, {{270, 130}}, threads);
      }
    }
  }
}

TEST(AttentionLayersTest, OddHeadsAndGroups) {
  // Head sizes that are not whole vectors, one query head per KV head, and a wide group.
  check_batch(AttentionShape{4, 4, 40, 0.15f}, DType::kF16, {{150, 0}, {33, 32}}, 2);
  check_batch(AttentionShape{16, 2, 80, 0.11f}, DType::kF32, {{90, 17}, {131, 130}}, 2);
}

}  // namespace
}  // namespace tachyon
