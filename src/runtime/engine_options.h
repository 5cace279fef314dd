// Knobs of the serving engine, with defaults sized for a small CPU machine.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/sha256.h"
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
  // SnapKV (runtime/snap_kv.h): once a prompt longer than this many tokens is computed, each
  // KV head keeps only this many of its positions: those the prompt's last 32 tokens attend
  // to most, and those 32. Blocks shared through the prefix cache are kept whole. 0: off.
  int snapkv_budget = 0;
  // The prefix cache's disk tier (kv_cache/kv_disk_tier.h), on when kv_disk_directory is set:
  // full blocks are also written there and read back on a prefix hit, across restarts, with
  // at most kv_disk_bytes in the directory.
  std::string kv_disk_directory;
  int64_t kv_disk_bytes = int64_t{8} << 30;
  // Names what the model computes besides the cache layout: its files' fingerprint and
  // whatever changes its arithmetic (quantized at load, numerics). Required by the disk tier;
  // blocks written under another one are never used.
  Sha256Digest model_fingerprint{};
  // Speculative decoding (off by default): outputs are the same bytes either way.
  SpeculativeOptions speculative;
};

}  // namespace tachyon
