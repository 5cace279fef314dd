#include "cli/model_session.h"

#include <algorithm>

#include <fmt/format.h>

#include "cli/model_path.h"
#include "kv_cache/kv_cache_type.h"
#include "model_files/file_fingerprint.h"

namespace tachyon::cli {

void add_model_options(CLI::App& command, ModelOptions& options) {
  add_model_option(command, options.model_path);
  command.add_option("-t,--threads", options.threads, "Threads (default: all hardware threads)")
      ->check(CLI::Range(0, 1024));
  command.add_option("-c,--ctx-size", options.context_size,
                     "Context size in tokens (default: the model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 24));
  command.add_option("-b,--batch-size", options.batch_size,
                     "Prompt tokens computed per forward pass (default 512)")
      ->check(CLI::Range(1, 1 << 16));
  add_cache_type_option(command, options.cache_type);
  command
      .add_option("--quantize", options.quantize,
                  "Quantize F32/F16/BF16/FP8 matrices at load to q4_0, q4_1, q5_0, q5_1, q8_0 "
                  "(as the gguf package's quantizers), q4_k or q6_k (as llama.cpp's without an "
                  "importance matrix); other types stay as stored")
      ->check(CLI::IsMember({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k"}));
  command.add_option("--experts-mem", options.experts_memory,
                     "MoE models larger than RAM: keep the routed experts in the model file and at "
                     "most this much of them in memory, the most used ones (a size such as 24GiB, "
                     "or a fraction of the experts' bytes such as 0.5; default: all in memory)");
}

void add_cache_type_option(CLI::App& command, std::string& cache_type) {
  command
      .add_option("--cache-type", cache_type,
                  "KV cache storage: f16 (default), f32 (exact) or q8 (int8 with a scale per 32 "
                  "values: about half of f16's memory)")
      ->check(CLI::IsMember({"f16", "f32", "q8"}));
}

void add_kv_evict_options(CLI::App& command, ModelOptions& options) {
  command
      .add_option("--kv-evict", options.kv_evict,
                  "none (default) or snapkv: compress a prompt longer than --kv-evict-budget to "
                  "that many positions per KV head, kept by the attention its last 32 tokens "
                  "pay (SnapKV)")
      ->check(CLI::IsMember({"none", "snapkv"}));
  command
      .add_option("--kv-evict-budget", options.kv_evict_budget,
                  "Positions per KV head a prompt keeps with --kv-evict snapkv (default 1024)")
      ->check(CLI::Range(64, 1 << 24));
}

void add_numerics_option(CLI::App& command, ModelOptions& options) {
  command
      .add_option("--numerics", options.numerics,
                  "Arithmetic: native (default) or llama.cpp (the same logits as llama.cpp, bit "
                  "for bit, on Q4_1 models; slower)")
      ->check(CLI::IsMember({"native", "llama.cpp"}));
}

Result<ModelSession> open_session(const ModelOptions& options) {
  ModelSession session;
  TACHYON_ASSIGN_OR_RETURN(session.files, open_model(options.model_path));
  const std::string& path = session.files.path;
  auto with_path = [&](const Status& status) {
    return Status(status.code(), path + ": " + status.message());
  };
  TACHYON_ASSIGN_OR_RETURN(session.tokenizer, session.files.load_tokenizer());
  std::optional<DType> quantize;
  if (!options.quantize.empty()) {
    static const std::pair<const char*, DType> kTypes[] = {{"q4_0", DType::kQ4_0},
                                                           {"q4_1", DType::kQ4_1},
                                                           {"q5_0", DType::kQ5_0},
                                                           {"q5_1", DType::kQ5_1},
                                                           {"q8_0", DType::kQ8_0},
                                                           {"q4_k", DType::kQ4_K},
                                                           {"q6_k", DType::kQ6_K}};
    for (const auto& [name, type] : kTypes) {
      if (options.quantize == name) quantize = type;
    }
  }
  MemoryAmount experts_memory;
  if (!options.experts_memory.empty()) {
    TACHYON_ASSIGN_OR_RETURN(experts_memory,
                             parse_memory_amount(options.experts_memory, "--experts-mem",
                                                 "the model's routed-expert bytes"));
  }
  TACHYON_ASSIGN_OR_RETURN(session.model, session.files.load_model(quantize, experts_memory));
  const ModelConfig& config = session.model->config();
  if (config.vocab_size != session.tokenizer->vocabulary_size()) {
    return with_path(corrupt_data(fmt::format("the embedding has {} rows but the vocabulary {} "
                                              "tokens",
                                              config.vocab_size,
                                              session.tokenizer->vocabulary_size())));
  }
  session.context_size = options.context_size > 0 ? options.context_size
                                                   : std::min(config.context_length, 4096);
  if (session.context_size > config.context_length) {
    return invalid_argument(fmt::format("context size {} is larger than the model's {}",
                                        session.context_size, config.context_length));
  }
  TACHYON_ASSIGN_OR_RETURN(session.cache_type, parse_kv_cache_type(options.cache_type));
  Status cache_fits = check_kv_cache_type(session.cache_type, config.head_size);
  if (!cache_fits.ok()) return with_path(cache_fits);
  if (options.numerics == "llama.cpp") {
    Status status = session.model->set_numerics(Numerics::kLlamaCpp);
    if (!status.ok()) return with_path(status);
  }
  session.pool = std::make_unique<ThreadPool>(options.threads);
  return session;
}

Result<Sha256Digest> model_fingerprint(const ModelSession& session, const ModelOptions& options) {
  TACHYON_ASSIGN_OR_RETURN(const Sha256Digest files, fingerprint_model_files(session.files.path));
  const std::string arithmetic =
      fmt::format("quantize {}; numerics {}", options.quantize, options.numerics);
  return sha256({std::span<const uint8_t>(files), as_bytes(arithmetic)});
}

Result<ChatTemplate> ModelSession::chat_template() const {
  TACHYON_ASSIGN_OR_RETURN(const std::string source, files.chat_template_source());
  Result<ChatTemplate> parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) {
    return Status(parsed.status().code(), files.path + ": " + parsed.status().message());
  }
  return parsed;
}

Result<std::string> ModelSession::render_chat(const ChatTemplate& chat_template,
                                              const boost::json::array& messages,
                                              bool add_generation_prompt) const {
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.add_generation_prompt = add_generation_prompt;
  const Vocabulary& vocabulary = tokenizer->vocabulary();
  if (vocabulary.bos_id) inputs.bos_token = vocabulary.tokens[*vocabulary.bos_id];
  if (vocabulary.eos_id) inputs.eos_token = vocabulary.tokens[*vocabulary.eos_id];
  return chat_template.render(inputs);
}

}  // namespace tachyon::cli
