#include "cli/model_session.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "cli/model_path.h"
#include "dist/mpi_communicator.h"
#include "kv_cache/kv_cache_type.h"
#include "model_files/file_fingerprint.h"
#include "models/shard_follower.h"

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
  add_mla_attention_option(command, options);
  add_parallel_options(command, options);
}

void add_mla_attention_option(CLI::App& command, ModelOptions& options) {
  command
      .add_option("--mla-attention", options.mla_attention,
                  "MLA models (DeepSeek, Kimi): absorbed (every token attends in the latent "
                  "space; a token's result never depends on how its prompt was cut into "
                  "chunks: the default), auto (long prompt chunks deep in a context through "
                  "keys and values decompressed from the latents, decodes absorbed: fewer "
                  "multiply-adds, a prompt's bits then depending on where its chunks were cut) "
                  "or decompressed (every token so)")
      ->check(CLI::IsMember({"absorbed", "decompressed", "auto"}));
}

void add_parallel_options(CLI::App& command, ModelOptions& options) {
  command
      .add_option("--tp", options.tensor_parallel,
                  "Tensor parallelism: split every layer's heads and rows over this many "
                  "processes (run under mpirun -np tp*pp; default 1)")
      ->check(CLI::Range(1, 4096));
  command
      .add_option("--pp", options.pipeline_parallel,
                  "Pipeline parallelism: split the layers into this many stages, one group of "
                  "--tp processes each (run under mpirun -np tp*pp; default 1)")
      ->check(CLI::Range(1, 4096));
  command
      .add_option("--ep", options.expert_parallel,
                  "Expert parallelism: MoE layers' routed experts split over this many ranks, "
                  "each expert whole on one (the --tp ranks: --ep equals --tp, its default)")
      ->check(CLI::Range(1, 4096));
  command.add_option("--expert-placement", options.expert_placement,
                     "Place the routed experts over the --tp ranks by a measured load: a JSON "
                     "file saved from GET /admin/experts or `tachyon bench --json` (default: "
                     "consecutive expert ids per rank)");
  command
      .add_option("--expert-replicas", options.expert_replicas,
                  "With --expert-placement: this many spare expert slots per rank and layer, "
                  "holding copies of the most chosen experts that share their tokens (default 0)")
      ->check(CLI::Range(0, 1 << 16));
  command
      .add_option("--expert-exchange", options.expert_exchange,
                  "How the --tp ranks exchange the experts' outputs: all-gather (every pair's "
                  "row to every rank), all-to-all (each row to the rank summing its token, then "
                  "the sums gathered: fewer bytes, one more message), or auto (all-to-all when "
                  "that saves each rank 256 KiB per layer; the default). Every choice gives the "
                  "same tokens")
      ->check(CLI::IsMember({"auto", "all-gather", "all-to-all"}));
}

namespace {

// Each layer's bytes in a GGUF file, then the output projection's (what pipeline stages are
// balanced by); empty for a Hugging Face folder (ModelShard then counts parameters).
std::vector<double> layer_bytes(const ModelFiles& files, const ModelConfig& config) {
  if (!files.gguf) return {};
  std::vector<double> bytes(static_cast<size_t>(config.num_layers) + 1, 0.0);
  for (const GgufTensorInfo& tensor : files.gguf->tensors()) {
    int layer = -1;
    if (std::sscanf(tensor.name.c_str(), "blk.%d.", &layer) == 1 && layer >= 0 &&
        layer < config.num_layers) {
      bytes[layer] += static_cast<double>(tensor.num_bytes);
    } else if (tensor.name == (config.tied_embeddings ? "token_embd.weight" : "output.weight")) {
      bytes.back() += static_cast<double>(tensor.num_bytes);
    }
  }
  return bytes;
}

// --expert-placement FILE [--expert-replicas N]: the routed experts over the --tp ranks by the
// file's measured load (each rank reads the same file, so all place them alike).
Result<std::shared_ptr<const ExpertPlacement>> place_experts(const ModelOptions& options,
                                                             const ModelConfig& config,
                                                             bool report) {
  const std::string& path = options.expert_placement;
  if (!config.moe.enabled()) {
    return invalid_argument("--expert-placement: the model has no routed experts");
  }
  if (options.tensor_parallel < 2) {
    return invalid_argument("--expert-placement places the experts over the --tp ranks: use "
                            "--tp 2 or more");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("--expert-placement {}: cannot read it", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<std::vector<ExpertLoad::Layer>> load = parse_expert_load(text, config.moe.num_experts);
  if (!load.ok()) {
    return invalid_argument(fmt::format("--expert-placement {}: {}", path, load.status().message()));
  }
  Result<ExpertPlacement> placement = ExpertPlacement::balanced(
      *load, config.moe.num_experts, options.tensor_parallel, options.expert_replicas);
  if (!placement.ok()) {
    return invalid_argument(
        fmt::format("--expert-placement {}: {}", path, placement.status().message()));
  }
  if (report) fmt::print(stderr, "tachyon: {}\n", placement->describe(*load));
  return std::make_shared<const ExpertPlacement>(std::move(*placement));
}

// The job's communicators and this rank's part of the model (--tp/--pp).
Result<ModelShard> join_job(const ModelOptions& options, const ModelConfig& config,
                            ModelSession& session) {
  const int ranks = options.tensor_parallel * options.pipeline_parallel;
  if (options.expert_parallel != 0 && options.expert_parallel != options.tensor_parallel) {
    return invalid_argument(fmt::format("--ep {} --tp {}: the routed experts are split over the "
                                        "tensor-parallel ranks, so --ep must equal --tp",
                                        options.expert_parallel, options.tensor_parallel));
  }
  if (!options.experts_memory.empty() || options.numerics != "native" ||
      options.kv_evict != "none") {
    return unsupported("--experts-mem, --numerics llama.cpp and --kv-evict run in one process "
                       "(not with --tp or --pp yet)");
  }
  if (!dist::launched_by_mpi()) {
    return invalid_argument(fmt::format("--tp {} --pp {} needs {} processes: start them with "
                                        "mpirun -np {} tachyon ...",
                                        options.tensor_parallel, options.pipeline_parallel, ranks,
                                        ranks));
  }
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<dist::MpiCommunicator> world,
                           dist::MpiCommunicator::world());
  if (world->size() != ranks) {
    return invalid_argument(fmt::format("--tp {} --pp {} needs {} processes; mpirun started {}",
                                        options.tensor_parallel, options.pipeline_parallel,
                                        ranks, world->size()));
  }
  TACHYON_ASSIGN_OR_RETURN(ModelShard shard,
                           ModelShard::plan(config, options.tensor_parallel,
                                            options.pipeline_parallel, world->rank(),
                                            layer_bytes(session.files, config)));
  if (options.expert_replicas > 0 && options.expert_placement.empty()) {
    return invalid_argument("--expert-replicas copies the most chosen experts: it needs their "
                            "measured load, --expert-placement FILE");
  }
  if (!options.expert_placement.empty()) {
    TACHYON_ASSIGN_OR_RETURN(shard.expert_placement,
                             place_experts(options, config, world->rank() == 0));
    shard.expert_spare = options.expert_replicas;
  }
  shard.expert_exchange = options.expert_exchange == "all-gather"   ? ExpertExchange::kAllGather
                          : options.expert_exchange == "all-to-all" ? ExpertExchange::kAllToAll
                                                                    : ExpertExchange::kAuto;
  session.tensor_group = world->split(shard.pp_stage, shard.tp_rank);
  session.world = std::move(world);
  shard.world = session.world.get();
  shard.tensor_group = session.tensor_group.get();
  return shard;
}

}  // namespace

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

namespace {

Result<ModelSession> open_session_here(const ModelOptions& options) {
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
  std::optional<ModelShard> shard;
  if (options.distributed()) {
    TACHYON_ASSIGN_OR_RETURN(const ModelConfig shape, session.files.config());
    Result<ModelShard> planned = join_job(options, shape, session);
    if (!planned.ok()) return with_path(planned.status());
    shard = std::move(*planned);
  } else if (!options.expert_placement.empty() || options.expert_replicas > 0) {
    return invalid_argument("--expert-placement and --expert-replicas place experts over the "
                            "ranks of --tp (under mpirun)");
  } else if (dist::launched_by_mpi()) {
    TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<dist::MpiCommunicator> world,
                             dist::MpiCommunicator::world());
    if (world->size() > 1) {
      return invalid_argument(fmt::format("mpirun started {} processes but neither --tp nor --pp "
                                          "says how to split the model over them",
                                          world->size()));
    }
  }
  TACHYON_ASSIGN_OR_RETURN(session.model,
                           session.files.load_model(quantize, experts_memory,
                                                    shard ? &*shard : nullptr));
  const ModelConfig& config = session.model->config();
  if (shard) {  // on stderr: stdout is the command's output (perplexity --json, generate)
    fmt::print(stderr, "tachyon: rank {}: {}; {:.1f} MiB of weights resident\n",
               session.world->rank(), shard->describe(config),
               static_cast<double>(session.model->weights().resident_bytes()) / (1 << 20));
  }
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
  if (options.mla_attention != "absorbed") {
    Status status = session.model->set_mla_attention(options.mla_attention == "auto"
                                                         ? MlaAttention::kAuto
                                                         : MlaAttention::kDecompressed);
    if (!status.ok()) return with_path(status);
  }
  session.pool = std::make_unique<ThreadPool>(options.threads);
  return session;
}

}  // namespace

bool leads_job(const ModelOptions& options) {
  if (!options.distributed() || !dist::launched_by_mpi()) return true;
  Result<std::unique_ptr<dist::MpiCommunicator>> world = dist::MpiCommunicator::world();
  return !world.ok() || (*world)->rank() == 0;
}

Result<ModelSession> open_session(const ModelOptions& options) {
  Result<ModelSession> session = open_session_here(options);
  if (!session.ok() && options.distributed() && dist::launched_by_mpi()) {
    fmt::print(stderr, "tachyon: error: {}\n", session.status().message());
    std::fflush(stderr);
    Result<std::unique_ptr<dist::MpiCommunicator>> world = dist::MpiCommunicator::world();
    if (world.ok()) (*world)->abort(1);
  }
  return session;
}

Status ModelSession::follow() {
  // A follower ends when the leader stops it, or with the job: when a rank fails or mpirun is
  // stopped, mpirun signals every rank and kills it a second later (the leader meanwhile ends
  // its running requests with errors).
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  Status status = ShardFollower(*model, *pool).run();
  if (!status.ok()) {
    spdlog::error("{}", status.message());
    world->abort(1);
  }
  return status;
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
