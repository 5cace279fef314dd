// Helpers shared by the engine tests: loading a GGUF model, greedy requests, an engine over a
// loaded model, running a request alone, and checking that every KV block came back.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model_files/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/snap_kv.h"

namespace tachyon::testing_util {

// SnapKV on a contiguous cache as the engine runs it: the prompt computed in chunks of `chunk`
// tokens (the observation window's tokens observed in whichever chunk computes them), each
// KV head compacted to `budget` positions, then `count` greedy tokens (the first one from the
// whole prompt). The positions kept go to `kept` when given.
inline std::vector<TokenId> contiguous_snapkv_tokens(DecoderModel& model, ThreadPool& pool,
                                                     DType cache_type,
                                                     std::span<const TokenId> prompt, int budget,
                                                     int chunk, int count,
                                                     KeptPositions* kept = nullptr) {
  const int length = static_cast<int>(prompt.size());
  KvCache cache = model.make_cache(length + count, cache_type);
  SnapKvScorer scorer(model, length, {.budget = budget});
  std::vector<float> logits;
  for (int start = 0; start < length; start += chunk) {
    auto observe = [&](int layer, const float* queries, int num_tokens) {
      scorer.observe(cache, start, layer, queries, num_tokens);
    };
    const DecoderModel::AttentionObserver observer = observe;
    EXPECT_TRUE(model.forward(prompt.subspan(start, std::min(chunk, length - start)), start,
                              cache, pool, 1, logits, 0, &observer)
                    .ok());
  }
  const int vocab = model.config().vocab_size;
  auto greedy = [&] {
    return static_cast<TokenId>(std::max_element(logits.begin(), logits.begin() + vocab) -
                                logits.begin());
  };
  std::vector<TokenId> tokens = {greedy()};
  const KeptPositions positions = scorer.kept_positions();
  if (kept != nullptr) *kept = positions;
  compact_cache(cache, positions);
  const int offset = length - static_cast<int>(positions[0][0].size());
  for (int t = 1; t < count; ++t) {
    const std::vector<TokenId> one = {tokens.back()};
    EXPECT_TRUE(model.forward(one, length - offset + t - 1, cache, pool, 1, logits, offset).ok());
    tokens.push_back(greedy());
  }
  return tokens;
}

// A GGUF file with its tokenizer and model (null members, and a test failure, when it does
// not load).
struct LoadedModel {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DecoderModel> model;
};

inline LoadedModel load_model(const std::string& path) {
  LoadedModel loaded;
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return loaded;
  loaded.file = std::move(*file);
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*loaded.file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(*loaded.file);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (tokenizer.ok() && model.ok()) {
    loaded.tokenizer = std::move(*tokenizer);
    loaded.model = std::move(*model);
  }
  return loaded;
}

inline EngineRequest greedy_request(std::vector<TokenId> prompt, int max_tokens) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  return request;
}

// `loaded` has a `model` and a `tokenizer` (unique_ptrs).
template <typename Loaded>
std::unique_ptr<Engine> make_engine(Loaded& loaded, ThreadPool& pool, EngineOptions options) {
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*loaded.model, *loaded.tokenizer, pool, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(*engine) : nullptr;
}

inline EngineOutput run_alone(Engine& engine, EngineRequest request) {
  Result<std::shared_ptr<RequestStream>> stream = engine.submit(std::move(request));
  EXPECT_TRUE(stream.ok()) << stream.status().message();
  return (*stream)->wait_for_all();
}

// Submits every request at once and waits for all of them, in order.
inline std::vector<EngineOutput> run_together(Engine& engine,
                                              const std::vector<EngineRequest>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    Result<std::shared_ptr<RequestStream>> stream = engine.submit(request);
    EXPECT_TRUE(stream.ok()) << stream.status().message();
    if (stream.ok()) streams.push_back(*stream);
  }
  std::vector<EngineOutput> outputs;
  for (auto& stream : streams) outputs.push_back(stream->wait_for_all());
  return outputs;
}

// The engine publishes its gauges after each step; wait for the last one.
inline EngineMetrics settled_metrics(const Engine& engine) {
  EngineMetrics metrics = engine.metrics();
  for (int i = 0; i < 200 && (metrics.num_running > 0 || metrics.kv_blocks_used > 0 ||
                              metrics.kv_local_blocks_used > 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    metrics = engine.metrics();
  }
  return metrics;
}

inline void expect_pool_back_to_full(const Engine& engine) {
  const EngineMetrics metrics = settled_metrics(engine);
  EXPECT_EQ(metrics.num_running, 0);
  EXPECT_EQ(metrics.num_waiting, 0);
  EXPECT_EQ(metrics.kv_blocks_used, 0) << "KV blocks leaked";
  EXPECT_EQ(metrics.kv_local_blocks_used, 0) << "local layers' KV blocks leaked";
}

}  // namespace tachyon::testing_util
