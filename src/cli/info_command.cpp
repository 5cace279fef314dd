// `tachyon info [-m MODEL] [--json]`: what a model file holds.
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "core/cpu_features.h"
#include "kernels/cpu/kernel_level.h"
#include "kv_cache/paged_kv_cache.h"
#include "model_files/model_summary.h"
#include "models/model_config.h"

namespace tachyon::cli {
namespace {

std::string human_count(uint64_t count) {
  if (count >= 1'000'000'000) return fmt::format("{:.2f}B", count / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.1f}M", count / 1e6);
  if (count >= 1'000) return fmt::format("{:.1f}K", count / 1e3);
  return std::to_string(count);
}

std::string optional_text(const std::optional<uint64_t>& value) {
  return value ? std::to_string(*value) : "unknown";
}

void print_text(const ModelSummary& s, const std::string& path) {
  auto line = [](const char* label, const std::string& value) {
    std::printf("%-14s %s\n", label, value.c_str());
  };
  line("file", fmt::format("{} ({:.1f} MB, GGUF v{})", path, s.file_bytes / 1e6, s.gguf_version));
  if (!s.name.empty()) line("name", s.name);
  line("architecture", s.architecture.empty() ? "unknown" : s.architecture);
  line("parameters", fmt::format("{} ({})", human_count(s.num_parameters), s.num_parameters));
  line("layers", optional_text(s.num_layers));
  line("embedding", optional_text(s.embedding_size));
  line("feed-forward", optional_text(s.feed_forward_size));
  line("heads", fmt::format("{} query, {} key/value, head size {}", optional_text(s.num_heads),
                            optional_text(s.num_kv_heads), optional_text(s.head_size)));
  if (s.num_experts) {
    line("experts",
         fmt::format("{} ({} used per token)", *s.num_experts, optional_text(s.num_experts_used)));
  }
  line("context", optional_text(s.context_length));
  if (s.rms_norm_epsilon) line("rms norm eps", fmt::format("{:g}", *s.rms_norm_epsilon));
  std::string rope = s.rope_freq_base ? fmt::format("freq base {:g}", *s.rope_freq_base)
                                      : std::string("freq base unknown");
  if (s.rope_dimensions) rope += fmt::format(", {} dimensions", *s.rope_dimensions);
  if (s.rope_scaling_type && *s.rope_scaling_type != "none") {
    rope += fmt::format(", {} scaling", *s.rope_scaling_type);
    if (s.rope_scaling_factor) rope += fmt::format(" x{:g}", *s.rope_scaling_factor);
    if (s.rope_original_context) rope += fmt::format(" from {}", *s.rope_original_context);
  } else {
    rope += ", no scaling";
  }
  line("rope", rope);
  std::string types;
  for (const auto& [type, count] : s.tensor_type_counts) {
    types += fmt::format("{}{} x {}", types.empty() ? "" : ", ", type, count);
  }
  uint64_t num_tensors = 0;
  for (const auto& [type, count] : s.tensor_type_counts) num_tensors += count;
  line("tensors", fmt::format("{} ({:.1f} MB): {}", num_tensors, s.num_tensor_bytes / 1e6, types));
  std::string tokenizer = s.tokenizer_model.empty() ? "none" : s.tokenizer_model;
  if (!s.tokenizer_pre.empty()) tokenizer += " (pre: " + s.tokenizer_pre + ")";
  tokenizer += fmt::format(", {} tokens", s.vocabulary_size);
  if (s.num_merges) tokenizer += fmt::format(", {} merges", s.num_merges);
  line("tokenizer", tokenizer);
  for (const SpecialToken& token : s.special_tokens) {
    line(fmt::format("{} token", token.role).c_str(),
         fmt::format("{} {}", token.id,
                     token.text.empty() ? "(outside the vocabulary)"
                                        : boost::json::serialize(boost::json::string(token.text))));
  }
  line("adds bos", s.add_bos ? "yes" : "no");
  line("chat template", s.has_chat_template ? "yes" : "no");
}

boost::json::object to_json(const ModelSummary& s, const std::string& path) {
  auto optional_value = [](const auto& value) -> boost::json::value {
    if (value) return boost::json::value(*value);
    return nullptr;
  };
  boost::json::object types;
  for (const auto& [type, count] : s.tensor_type_counts) types[type] = count;
  boost::json::array special;
  for (const SpecialToken& token : s.special_tokens) {
    special.push_back({{"role", token.role}, {"id", token.id}, {"text", token.text}});
  }
  return {
      {"file", path},
      {"gguf_version", s.gguf_version},
      {"name", s.name},
      {"architecture", s.architecture},
      {"parameters", s.num_parameters},
      {"layers", optional_value(s.num_layers)},
      {"embedding_size", optional_value(s.embedding_size)},
      {"feed_forward_size", optional_value(s.feed_forward_size)},
      {"heads", optional_value(s.num_heads)},
      {"kv_heads", optional_value(s.num_kv_heads)},
      {"head_size", optional_value(s.head_size)},
      {"experts", optional_value(s.num_experts)},
      {"experts_used", optional_value(s.num_experts_used)},
      {"context_length", optional_value(s.context_length)},
      {"rms_norm_epsilon", optional_value(s.rms_norm_epsilon)},
      {"rope_freq_base", optional_value(s.rope_freq_base)},
      {"rope_dimensions", optional_value(s.rope_dimensions)},
      {"rope_scaling_type", optional_value(s.rope_scaling_type)},
      {"rope_scaling_factor", optional_value(s.rope_scaling_factor)},
      {"tensor_types", types},
      {"tokenizer_model", s.tokenizer_model},
      {"tokenizer_pre", s.tokenizer_pre},
      {"vocabulary_size", s.vocabulary_size},
      {"merges", s.num_merges},
      {"special_tokens", special},
      {"add_bos", s.add_bos},
      {"chat_template", s.has_chat_template},
  };
}

// Bytes the KV cache spends per token (keys and values of every layer, f16): what sets how
// many tokens fit in memory. MLA caches one latent per token and layer.
int64_t kv_bytes_per_token(const ModelConfig& config) {
  return static_cast<int64_t>(PagedKvCache::block_bytes(config.num_layers, config.kv_size(), 1,
                                                        DType::kF16,
                                                        config.kv_values_are_keys()));
}

// How the model attends and routes, as tachyon runs it (from its ModelConfig).
void print_structure(const ModelConfig& config) {
  auto line = [](const char* label, const std::string& value) {
    std::printf("%-14s %s\n", label, value.c_str());
  };
  const LatentAttentionConfig& mla = config.mla;
  if (mla.enabled()) {
    line("attention",
         fmt::format("MLA, {} heads: {}kv_lora {}, per head {} + {} rotary query/key dims, "
                     "value {}; cached latent {} values per token per layer",
                     config.num_heads,
                     mla.q_lora_rank > 0 ? fmt::format("q_lora {}, ", mla.q_lora_rank) : "",
                     mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim,
                     mla.latent_size()));
  }
  const MixtureOfExpertsConfig& moe = config.moe;
  if (moe.enabled()) {
    std::string text = fmt::format("{} routed experts of width {} ({} per token, {}{}{}{})",
                                   moe.num_experts, moe.expert_ffn_size, moe.experts_per_token,
                                   moe.scoring == ExpertScoring::kSigmoid ? "sigmoid" : "softmax",
                                   moe.has_selection_bias ? " + selection bias" : "",
                                   moe.normalize_weights ? ", normalised" : "",
                                   moe.weights_scale != 1.0
                                       ? fmt::format(", scaled x{:g}", moe.weights_scale)
                                       : "");
    if (moe.num_groups > 1) {
      text += fmt::format(", best {} of {} groups", moe.groups_used, moe.num_groups);
    }
    if (moe.shared_ffn_size > 0) {
      text += fmt::format(", shared experts of width {}", moe.shared_ffn_size);
    }
    if (moe.first_dense_layers > 0) {
      text += fmt::format(", first {} layer(s) dense", moe.first_dense_layers);
    }
    line("moe", text);
  }
  line("kv cache", fmt::format("{} bytes per token (f16)", kv_bytes_per_token(config)));
}

boost::json::object structure_json(const ModelConfig& config) {
  boost::json::object out{{"kv_bytes_per_token", kv_bytes_per_token(config)}};
  const LatentAttentionConfig& mla = config.mla;
  if (mla.enabled()) {
    out["mla"] = {{"q_lora_rank", mla.q_lora_rank},
                  {"kv_lora_rank", mla.kv_lora_rank},
                  {"qk_nope_head_dim", mla.qk_nope_head_dim},
                  {"qk_rope_head_dim", mla.qk_rope_head_dim},
                  {"v_head_dim", mla.v_head_dim}};
  }
  const MixtureOfExpertsConfig& moe = config.moe;
  if (moe.enabled()) {
    out["moe"] = {{"experts", moe.num_experts},
                  {"experts_per_token", moe.experts_per_token},
                  {"expert_ffn_size", moe.expert_ffn_size},
                  {"shared_ffn_size", moe.shared_ffn_size},
                  {"first_dense_layers", moe.first_dense_layers},
                  {"scoring", moe.scoring == ExpertScoring::kSigmoid ? "sigmoid" : "softmax"},
                  {"selection_bias", moe.has_selection_bias},
                  {"normalize_weights", moe.normalize_weights},
                  {"weights_scale", moe.weights_scale},
                  {"groups", moe.num_groups},
                  {"groups_used", moe.groups_used}};
  }
  return out;
}

// A Hugging Face folder: its shards, tensors by dtype and the config tachyon reads from it.
Status print_folder(const HfCheckpoint& checkpoint, bool json) {
  std::map<std::string, int> dtypes;
  uint64_t bytes = 0;
  for (const auto& [name, tensor] : checkpoint.tensors()) {
    ++dtypes[std::string(safetensors_dtype_name(tensor->dtype))];
    bytes += tensor->end - tensor->begin;
  }
  Result<ModelConfig> config = ModelConfig::from_hf_checkpoint(checkpoint);
  if (json) {
    boost::json::object types;
    for (const auto& [dtype, count] : dtypes) types[dtype] = count;
    boost::json::object out{{"path", checkpoint.dir()},
                            {"format", "huggingface"},
                            {"shards", checkpoint.shard_names().size()},
                            {"tensors", checkpoint.tensors().size()},
                            {"tensor_bytes", bytes},
                            {"tensor_types", types}};
    if (config.ok()) {
      out["architecture"] = config->architecture;
      out["layers"] = config->num_layers;
      out["embedding"] = config->hidden_size;
      out["heads"] = config->num_heads;
      out["kv_heads"] = config->num_kv_heads;
      out["head_size"] = config->head_size;
      out["vocabulary_size"] = config->vocab_size;
      out["context_length"] = config->context_length;
      for (const auto& [key, value] : structure_json(*config)) out[key] = value;
    } else {
      out["config_error"] = config.status().message();
    }
    std::printf("%s\n", boost::json::serialize(out).c_str());
    return Status();
  }
  std::printf("%-14s %s\n", "path", checkpoint.dir().c_str());
  std::printf("%-14s Hugging Face folder, %zu safetensors shard(s), %zu tensors, %.1f MB\n",
              "format", checkpoint.shard_names().size(), checkpoint.tensors().size(),
              static_cast<double>(bytes) / 1e6);
  std::string types;
  for (const auto& [dtype, count] : dtypes) {
    types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", dtype, count);
  }
  std::printf("%-14s %s\n", "tensor types", types.c_str());
  if (!config.ok()) return Status(config.status().code(), checkpoint.dir() + ": " + config.status().message());
  std::printf("%-14s %s, %d layers, embedding %d, %d heads (%d KV) of %d, vocabulary %d, "
              "context %d\n",
              "architecture", config->architecture.c_str(), config->num_layers,
              config->hidden_size, config->num_heads, config->num_kv_heads, config->head_size,
              config->vocab_size, config->context_length);
  print_structure(*config);
  return Status();
}

}  // namespace

void add_info_command(CLI::App& app) {
  struct Options {
    std::string model;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("info", "Show what a model file holds");
  add_model_option(*command, options->model);
  command->add_flag("--json", options->json, "Print JSON instead of text");
  command->callback([options] {
    Result<ModelFiles> files = open_model(options->model);
    if (!files.ok()) return fail(files.status().message());
    if (files->checkpoint) {
      Status status = print_folder(*files->checkpoint, options->json);
      if (!status.ok()) return fail(status.message());
    } else {
      // The metadata as stored, then what tachyon makes of it (when it can run the model).
      const ModelSummary summary = summarize_model(*files->gguf);
      Result<ModelConfig> config = ModelConfig::from_gguf(*files->gguf);
      if (options->json) {
        boost::json::object out = to_json(summary, files->path);
        if (config.ok()) {
          for (const auto& [key, value] : structure_json(*config)) out[key] = value;
        } else {
          out["config_error"] = config.status().message();
        }
        std::printf("%s\n", boost::json::serialize(out).c_str());
      } else {
        print_text(summary, files->path);
        if (config.ok()) print_structure(*config);
      }
    }
    if (!options->json) {
      // What this machine would run the model with (TACHYON_CPU_LEVEL forces a level).
      std::printf("%-14s %s\n", "cpu", CpuFeatures::get().describe().c_str());
      std::printf("%-14s %s\n", "kernels", kernels::describe_family_levels().c_str());
    }
  });
}

}  // namespace tachyon::cli
