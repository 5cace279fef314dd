// Knobs of the serving engine, with defaults sized for a small CPU machine.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "speculative/speculative_options.h"

namespace tachyon {

struct EngineOptions {
  // Most tokens (decodes + prompt chunks) in one engine step. Bounds the latency a long prompt
  // adds to running streams.
  int max_batch_tokens = 256;
  // Most sequences running at once.
  int max_running_requests = 64;
  // Requests that would wait for a running slot beyond this many are refused (kUnavailable:
  // retry later). 0: never queue, refuse when every slot is busy.
  int max_waiting_requests = 1024;
  // Tokens per KV block.
  int block_size = 16;
  // KV memory: bytes for the block pool. 0 ⇒ kv_cache_fraction of the free RAM.
  int64_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.25;
  DType kv_cache_type = DType::kF16;
  // Longest sequence (prompt + generated); 0 ⇒ the model's context length.
  int max_context = 0;
  bool enable_prefix_cache = true;
  // Speculative decoding (off by default): outputs are the same bytes either way.
  SpeculativeOptions speculative;
};

}  // namespace tachyon
