// What the model-running commands share: the file, its tokenizer, the model, the thread pool,
// and the options that choose them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/sha256.h"
#include "core/thread_pool.h"
#include "cli/model_path.h"
#include "models/decoder_model.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {

struct ModelOptions {
  std::string model_path;
  int threads = 0;       // 0: one per hardware thread
  int context_size = 0;  // 0: min(model context, 4096)
  int batch_size = 512;
  std::string cache_type = "f16";  // KV cache storage: f16, f32 or q8
  std::string numerics = "native";  // whose arithmetic: native or llama.cpp (DecoderModel)
  std::string quantize;  // --quantize: "" or q4_0, q4_1, q5_0, q5_1, q8_0
  std::string experts_memory;  // --experts-mem: "" (all resident), a size or a fraction
  std::string kv_evict = "none";  // --kv-evict: none or snapkv
  int kv_evict_budget = 1024;     // --kv-evict-budget
  // The SnapKV budget the options ask for (0: off).
  int snapkv_budget() const { return kv_evict == "snapkv" ? kv_evict_budget : 0; }
};

// Adds -m/--model, -t/--threads, -c/--ctx-size, -b/--batch-size, --cache-type, --quantize and
// --experts-mem.
void add_model_options(CLI::App& command, ModelOptions& options);
// Adds --cache-type (f16, f32 or q8) writing to `cache_type`.
void add_cache_type_option(CLI::App& command, std::string& cache_type);
// Adds --kv-evict (none or snapkv) and --kv-evict-budget.
void add_kv_evict_options(CLI::App& command, ModelOptions& options);
// Adds --numerics (the single-sequence commands: generate, chat, perplexity).
void add_numerics_option(CLI::App& command, ModelOptions& options);

struct ModelSession {
  ModelFiles files;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<ThreadPool> pool;
  int context_size = 0;
  DType cache_type = DType::kF16;

  // The model's chat template, or an error saying it has none.
  Result<ChatTemplate> chat_template() const;
  // Renders `messages` with the model's template (BOS/EOS text from the vocabulary).
  Result<std::string> render_chat(const ChatTemplate& chat_template,
                                  const boost::json::array& messages,
                                  bool add_generation_prompt) const;
};

// Opens the model (the default one when no path was given) with clear errors.
Result<ModelSession> open_session(const ModelOptions& options);

// Names what the session's model computes: its files' fingerprint, the quantization at load
// and the numerics (keys the KV disk tier).
Result<Sha256Digest> model_fingerprint(const ModelSession& session, const ModelOptions& options);

}  // namespace tachyon::cli
