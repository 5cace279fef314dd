#include "models/model_shard.h"

#include <gtest/gtest.h>

#include "models/shard_call.h"

namespace tachyon {
namespace {

// The default model's shape (SmolLM2-135M): 9 query heads over 3 KV heads, 30 layers.
ModelConfig smollm_shape() {
  ModelConfig config;
  config.num_layers = 30;
  config.hidden_size = 576;
  config.ffn_size = 1536;
  config.num_heads = 9;
  config.num_kv_heads = 3;
  config.head_size = 64;
  config.vocab_size = 49152;
  return config;
}

TEST(RowSplitTest, EvenInWholeUnits) {
  const RowSplit split = RowSplit::even(576, 2, 64);
  EXPECT_EQ(split.begin, (std::vector<int64_t>{0, 256, 576}));
  EXPECT_EQ(split.count(0) % 64, 0);
  // A size that is no multiple of the unit is split row by row.
  EXPECT_EQ(RowSplit::even(7, 2, 64).begin, (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(RowSplit::even(3, 2, 1).begin, (std::vector<int64_t>{0, 1, 3}));
}

TEST(ModelShardTest, FfnRowsSplitEvenlyInWholeQuantizationBlocks) {
  // 3 KV heads over 2 ranks: rank 1 has 2 of them (and 6 of the 9 query heads). The FFN's rows
  // still split evenly (each phase between two exchanges takes its slowest rank's time, so
  // extra FFN rows on rank 0 would not make up for it), in whole 32-row blocks: each rank
  // quantizes its own columns of the down projection's input.
  const ModelConfig config = smollm_shape();
  for (int rank = 0; rank < 2; ++rank) {
    Result<ModelShard> shard = ModelShard::plan(config, 2, 1, rank);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    EXPECT_EQ(shard->ffn_rows.begin, (std::vector<int64_t>{0, 768, 1536}));
    EXPECT_EQ(shard->local_kv_heads(), rank == 0 ? 1 : 2);
  }
  // 3 ranks: 1536 / 32 = 48 blocks, 16 each.
  Result<ModelShard> three = ModelShard::plan(config, 3, 1, 0);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->ffn_rows.begin, (std::vector<int64_t>{0, 512, 1024, 1536}));
  // 256-row blocks (the K-quants' 8-bit input) where they split evenly: 14336 = 56 x 256.
  ModelConfig llama = config;
  llama.ffn_size = 14336;
  Result<ModelShard> big = ModelShard::plan(llama, 2, 1, 0);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(big->ffn_rows.begin, (std::vector<int64_t>{0, 7168, 14336}));
  // Not where they would not (1280 = 5 x 256 over 2 ranks: 512 / 768): 32-row blocks.
  llama.ffn_size = 1280;
  EXPECT_EQ(ModelShard::plan(llama, 2, 1, 0)->ffn_rows.begin,
            (std::vector<int64_t>{0, 640, 1280}));
  // Sizes that are no multiple of 32 keep the 16-row tiles: 1296 = 81 x 16.
  llama.ffn_size = 1296;
  EXPECT_EQ(ModelShard::plan(llama, 2, 1, 0)->ffn_rows.begin,
            (std::vector<int64_t>{0, 640, 1296}));
}

TEST(ModelShardTest, TensorParallelCoversEveryRowOnce) {
  const ModelConfig config = smollm_shape();
  int64_t kv_heads = 0, hidden = 0, ffn = 0, vocab = 0;
  for (int rank = 0; rank < 2; ++rank) {
    Result<ModelShard> shard = ModelShard::plan(config, 2, 1, rank);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    EXPECT_EQ(shard->tp_rank, rank);
    EXPECT_EQ(shard->first_layer, 0);
    EXPECT_EQ(shard->end_layer, 30);
    EXPECT_GE(shard->local_kv_heads(), 1);
    kv_heads += shard->local_kv_heads();
    hidden += shard->hidden_rows.count(rank);
    ffn += shard->ffn_rows.count(rank);
    vocab += shard->vocab_rows.count(rank);
  }
  EXPECT_EQ(kv_heads, 3);  // 2 + 1: KV heads go whole, with their query heads
  EXPECT_EQ(hidden, 576);
  EXPECT_EQ(ffn, 1536);
  EXPECT_EQ(vocab, 49152);
}

TEST(ModelShardTest, PipelineStagesBalanceWeightsAndCoverEveryLayer) {
  const ModelConfig config = smollm_shape();
  int next = 0;
  for (int stage = 0; stage < 2; ++stage) {
    Result<ModelShard> shard = ModelShard::plan(config, 1, 2, stage);
    ASSERT_TRUE(shard.ok());
    EXPECT_EQ(shard->first_layer, next);
    EXPECT_GT(shard->num_layers(), 0);
    next = shard->end_layer;
  }
  EXPECT_EQ(next, 30);
  // The last stage also projects to the 49152-token vocabulary (as much as ~8 layers), so it
  // gets fewer layers.
  EXPECT_LT(ModelShard::plan(config, 1, 2, 1)->num_layers(), 15);
  // Every layer its own stage when there are as many stages as layers.
  for (int stage = 0; stage < 30; ++stage) {
    Result<ModelShard> shard = ModelShard::plan(config, 1, 30, stage);
    ASSERT_TRUE(shard.ok());
    EXPECT_EQ(shard->first_layer, stage);
    EXPECT_EQ(shard->end_layer, stage + 1);
  }
}

TEST(ModelShardTest, WorldRanksAreStageMajor) {
  Result<ModelShard> shard = ModelShard::plan(smollm_shape(), 2, 2, 3);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard->pp_stage, 1);
  EXPECT_EQ(shard->tp_rank, 1);
  EXPECT_EQ(shard->world_rank(0, 1), 1);
  EXPECT_FALSE(shard->leader());
  EXPECT_TRUE(ModelShard::plan(smollm_shape(), 2, 2, 0)->leader());
}

TEST(ModelShardTest, ImpossibleSplitsAreClearErrors) {
  ModelConfig config = smollm_shape();
  Result<ModelShard> shard = ModelShard::plan(config, 4, 1, 0);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("3 KV heads"), std::string::npos)
      << shard.status().message();
  shard = ModelShard::plan(config, 1, 31, 0);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("30 layers"), std::string::npos);
  config.moe.num_experts = 2;
  config.moe.experts_per_token = 1;
  config.moe.expert_ffn_size = 64;
  config.num_kv_heads = 9;
  shard = ModelShard::plan(config, 3, 1, 0);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("2 routed experts"), std::string::npos);
  config.mla.kv_lora_rank = 512;
  config.num_kv_heads = 1;
  config.moe.num_experts = 0;
  shard = ModelShard::plan(config, 10, 1, 0);  // MLA: 9 query heads for 10 ranks
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("9 attention heads"), std::string::npos)
      << shard.status().message();
  EXPECT_TRUE(ModelShard::plan(config, 1, 2, 1).ok());  // pipeline stages take MLA layers
}

// MLA: the query heads split over the TP ranks, the latent (one KV head) cached whole by each.
TEST(ModelShardTest, LatentAttentionSplitsQueryHeadsAndKeepsTheLatentOnEveryRank) {
  ModelConfig config = smollm_shape();
  config.mla.kv_lora_rank = 512;
  config.mla.qk_rope_head_dim = 64;
  config.num_kv_heads = 1;
  config.head_size = 576;
  std::vector<int> owners(9, 0);
  for (int rank = 0; rank < 2; ++rank) {
    Result<ModelShard> shard = ModelShard::plan(config, 2, 1, rank);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    EXPECT_EQ(shard->local_kv_heads(), 1);
    EXPECT_EQ(shard->first_kv_head(), 0);
    EXPECT_GE(shard->local_heads(), 4);
    for (int h = 0; h < 9; ++h) owners[h] += shard->owns_head(h);
    EXPECT_NE(shard->describe(config).find("the latent"), std::string::npos);
  }
  EXPECT_EQ(owners, std::vector<int>(9, 1));  // each query head on exactly one rank
}

TEST(ModelShardTest, ExpertsSplitWholeOverTheTensorParallelRanks) {
  ModelConfig config = smollm_shape();
  config.moe.num_experts = 9;
  config.moe.experts_per_token = 2;
  config.moe.expert_ffn_size = 64;
  int owned = 0;
  for (int rank = 0; rank < 2; ++rank) {
    Result<ModelShard> shard = ModelShard::plan(config, 2, 1, rank);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    for (int e = 0; e < 9; ++e) owned += shard->owns_expert(1, e);
  }
  EXPECT_EQ(owned, 9);  // each expert on exactly one rank
}

TEST(ShardCallTest, EncodesEveryField) {
  ShardCall call;
  call.kind = ShardCall::Kind::kForwardBatch;
  call.cache_id = 0x1234567890abcdefULL;
  call.cache_type = DType::kQ8_0;
  call.capacity = 1000;
  call.num_local_blocks = 7;
  call.expert_spare = 3;
  call.batch.block_size = 16;
  call.batch.block_copies = {{3, 4}};
  call.batch.key_shifts = {{5, 16, 32}};
  call.batch.tokens = {1, 2, 3};
  call.batch.positions = {10, 11, 0};
  call.batch.slots = {42, 43, 80};
  call.batch.logits_tokens = {1, 2};
  call.batch.sequences.resize(2);
  call.batch.sequences[0] = {0, 2, 10, {2, 3}, {}};
  call.batch.sequences[1] = {2, 1, 0, {5}, {}};
  const ShardCall back = ShardCall::decode(call.encode());
  EXPECT_EQ(back.cache_id, call.cache_id);
  EXPECT_EQ(back.cache_type, DType::kQ8_0);
  EXPECT_EQ(back.capacity, 1000);
  EXPECT_EQ(back.num_local_blocks, 7);
  EXPECT_EQ(back.expert_spare, 3);
  EXPECT_EQ(back.batch.block_copies.size(), 1u);
  EXPECT_EQ(back.batch.block_copies[0].to, 4);
  EXPECT_EQ(back.batch.key_shifts[0].delta, 32);
  EXPECT_EQ(back.batch.tokens, call.batch.tokens);
  EXPECT_EQ(back.batch.positions, call.batch.positions);
  EXPECT_EQ(back.batch.slots, call.batch.slots);
  EXPECT_EQ(back.batch.logits_tokens, call.batch.logits_tokens);
  ASSERT_EQ(back.batch.sequences.size(), 2u);
  EXPECT_EQ(back.batch.sequences[0].block_table, (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(back.batch.sequences[1].start_position, 0);
  EXPECT_EQ(back.batch.sequences[1].first_token, 2);
}

}  // namespace
}  // namespace tachyon
