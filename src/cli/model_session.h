// What the model-running commands share: the file, its tokenizer, the model, the thread pool,
// and the options that choose them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/sha256.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
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
  std::string mla_attention = "absorbed";  // --mla-attention: absorbed, decompressed or auto
  std::string kv_evict = "none";  // --kv-evict: none or snapkv
  int kv_evict_budget = 1024;     // --kv-evict-budget
  // Several processes running one model (mpirun -np tp*pp ...): --tp and --pp.
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int expert_parallel = 0;  // --ep: 0 or --tp (the routed experts go over the TP ranks)
  std::string expert_placement;  // --expert-placement: a measured expert load (JSON file)
  int expert_replicas = 0;       // --expert-replicas: spare expert slots per rank and layer
  std::string expert_exchange = "auto";  // --expert-exchange: auto, all-gather or all-to-all
  bool distributed() const { return tensor_parallel * pipeline_parallel > 1; }
  // The SnapKV budget the options ask for (0: off).
  int snapkv_budget() const { return kv_evict == "snapkv" ? kv_evict_budget : 0; }
};

// Adds -m/--model, -t/--threads, -c/--ctx-size, -b/--batch-size, --cache-type, --quantize,
// --experts-mem, --mla-attention, --tp and --pp.
void add_model_options(CLI::App& command, ModelOptions& options);
// Adds --mla-attention (how MLA models attend: MlaAttention).
void add_mla_attention_option(CLI::App& command, ModelOptions& options);
// Adds --tp and --pp (a model split over the processes of an mpirun job).
void add_parallel_options(CLI::App& command, ModelOptions& options);
// Adds --cache-type (f16, f32 or q8) writing to `cache_type`.
void add_cache_type_option(CLI::App& command, std::string& cache_type);
// Adds --kv-evict (none or snapkv) and --kv-evict-budget.
void add_kv_evict_options(CLI::App& command, ModelOptions& options);
// Adds --numerics (the single-sequence commands: generate, chat, perplexity).
void add_numerics_option(CLI::App& command, ModelOptions& options);

struct ModelSession {
  // With --tp/--pp: every rank of the job and this stage's TP ranks (declared before `model`,
  // which uses them until it is gone).
  std::unique_ptr<dist::Communicator> world;
  std::unique_ptr<dist::Communicator> tensor_group;
  ModelFiles files;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<ThreadPool> pool;
  int context_size = 0;
  DType cache_type = DType::kF16;

  // A rank other than the leader of a model split over several processes: it only follows.
  bool follows() const { return model->shard().distributed() && !model->shard().leader(); }
  // A follower's whole job: the leader's forward passes until the leader stops. An error
  // here ends every rank (the others would wait on this one for ever).
  Status follow();

  // The model's chat template, or an error saying it has none.
  Result<ChatTemplate> chat_template() const;
  // Renders `messages` with the model's template (BOS/EOS text from the vocabulary).
  Result<std::string> render_chat(const ChatTemplate& chat_template,
                                  const boost::json::array& messages,
                                  bool add_generation_prompt) const;
};

// Opens the model (the default one when no path was given) with clear errors. With --tp/--pp
// (under mpirun) this process's part of it; there a failure prints its error and ends every
// rank of the job (the others would wait on this one for ever). A command then runs on the
// leader and, on the other ranks, returns session.follow().
Result<ModelSession> open_session(const ModelOptions& options);
// False on the ranks of an --tp/--pp job other than the leader (world rank 0): those only
// follow (`serve` starts no server there).
bool leads_job(const ModelOptions& options);

// Names what the session's model computes: its files' fingerprint, the quantization at load
// and the numerics (keys the KV disk tier).
Result<Sha256Digest> model_fingerprint(const ModelSession& session, const ModelOptions& options);

}  // namespace tachyon::cli
