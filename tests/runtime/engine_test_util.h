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

namespace tachyon::testing_util {

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
