#include "models/decoder_weights.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/half.h"
#include "kernels/cpu/kernel_level.h"
#include "kernels/cpu/repacked_weights.h"
#include "kernels/reference/dequantize.h"
#include "kernels/reference/fp8.h"
#include "kernels/reference/quantize_weights.h"

namespace tachyon {
namespace {

// A tensor as the loader takes it, whichever file it comes from: dimensions in ggml's order
// (shape[0] is the contiguous one), bytes in the file or in a converted copy.
struct TensorView {
  std::string name;  // as the file names it, for messages
  DType type = DType::kF32;
  std::vector<int64_t> shape;
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;
};
// Finds a tensor by its GGUF name: nothing when the file lacks it, an error when it has it in
// a form tachyon cannot use.
using TensorLookup = std::function<Result<std::optional<TensorView>>(const std::string&)>;

class TensorLoader {
 public:
  TensorLoader(TensorLookup lookup, DecoderWeights& weights, std::optional<DType> quantize,
               bool experts_in_file)
      : lookup_(std::move(lookup)), weights_(weights), quantize_(quantize),
        experts_in_file_(experts_in_file) {}

  // --experts-mem: the routed experts stay in the file (ExpertCache reads them when chosen).
  bool experts_in_file() const { return experts_in_file_; }
  // Working copies go to `arena` from now on (null: the weights' own).
  void set_arena(HugePageArena* arena) { arena_ = arena; }

  // A matrix with GGUF shape [cols, rows]; with `count` >= 0 only its rows [first, first +
  // count) (a tensor-parallel rank's), whose bytes alone are read.
  Result<kernels::WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols,
                                       int64_t first = 0, int64_t count = -1) {
    TACHYON_ASSIGN_OR_RETURN(TensorView tensor, matrix_rows(name, rows, cols, first, count));
    const int64_t taken = tensor.shape[1];
    return working_copy(std::move(tensor), taken, cols);
  }

  // Rows [first, first + count) of a matrix as the file stores them, not copied: for a table
  // only looked up row by row (a pipeline's first stage's embedding), whose pages the OS reads
  // when a token needs them.
  Result<kernels::WeightMatrix> file_rows(const std::string& name, int64_t rows, int64_t cols,
                                          int64_t first, int64_t count) {
    TACHYON_ASSIGN_OR_RETURN(TensorView tensor, matrix_rows(name, rows, cols, first, count));
    if (!kernels::matmul_supports(tensor.type)) return cannot_compute(tensor);
    return kernels::WeightMatrix{tensor.type, tensor.data, count, cols};
  }

  // `count` matrices of [cols, rows] (experts, or MLA's per-head matrices): one GGUF tensor of
  // shape [cols, rows, count], or (Hugging Face) one tensor per matrix, looked up as
  // "<name>#<index>". `in_file`: views into the file's mapping, not copied (GGUF only).
  // `wanted`, when given, says which of them to load (an expert-parallel rank's); the others
  // stay empty.
  Result<std::vector<kernels::WeightMatrix>> matrices(
      const std::string& name, int count, int64_t rows, int64_t cols, bool in_file = false,
      const std::function<bool(int)>& wanted = nullptr) {
    std::vector<kernels::WeightMatrix> out;
    TACHYON_ASSIGN_OR_RETURN(std::optional<TensorView> stacked, lookup_(name));
    if (!stacked) {
      if (in_file) {
        return unsupported(fmt::format("--experts-mem reads experts stacked in one GGUF tensor; "
                                       "'{}' is not (convert the model to GGUF)",
                                       name));
      }
      for (int i = 0; i < count; ++i) {
        if (wanted && !wanted(i)) {
          out.emplace_back();
          continue;
        }
        TACHYON_ASSIGN_OR_RETURN(kernels::WeightMatrix w,
                                 matrix(fmt::format("{}#{}", name, i), rows, cols));
        out.push_back(w);
      }
      return out;
    }
    if (stacked->shape.size() != 3 || stacked->shape[0] != cols || stacked->shape[1] != rows ||
        stacked->shape[2] != count) {
      return corrupt_data(fmt::format("tensor '{}' has shape [{}], expected [{}, {}, {}]",
                                      stacked->name, fmt::join(stacked->shape, ", "), cols, rows,
                                      count));
    }
    const DTypeInfo& info = dtype_info(stacked->type);
    if (info.block_elements == 0 || cols % info.block_elements != 0) {
      return unsupported(fmt::format("tensor '{}' has type {}, which tachyon cannot compute with "
                                     "yet",
                                     stacked->name, dtype_name(stacked->type)));
    }
    const size_t slice_bytes = static_cast<size_t>(cols / info.block_elements) * info.block_bytes *
                               static_cast<size_t>(rows);
    for (int i = 0; i < count; ++i) {
      if (wanted && !wanted(i)) {
        out.emplace_back();
        continue;
      }
      TensorView slice{fmt::format("{}[{}]", stacked->name, i), stacked->type, {cols, rows},
                       rows * cols, stacked->data + slice_bytes * i};
      if (in_file) {
        if (!kernels::matmul_supports(slice.type)) {
          return unsupported(fmt::format("tensor '{}' has type {}, which tachyon cannot compute "
                                         "with yet",
                                         stacked->name, dtype_name(slice.type)));
        }
        out.push_back(kernels::WeightMatrix{slice.type, slice.data, rows, cols});
        continue;
      }
      TACHYON_ASSIGN_OR_RETURN(kernels::WeightMatrix w, working_copy(std::move(slice), rows, cols));
      out.push_back(w);
    }
    return out;
  }

  // A matrix computed at load (f32 [rows, cols]), kept by the weights.
  kernels::WeightMatrix computed_matrix(const std::string& name, std::vector<float> values,
                                        int64_t rows, int64_t cols) {
    auto bytes = std::make_unique<std::vector<uint8_t>>(values.size() * sizeof(float));
    std::memcpy(bytes->data(), values.data(), bytes->size());
    TensorView view{name, DType::kF32, {cols, rows}, rows * cols, bytes->data()};
    weights_.converted_bytes.push_back(std::move(bytes));
    // F32 takes no quantization and every float type is supported: this cannot fail.
    return *working_copy(std::move(view), rows, cols, /*may_quantize=*/false);
  }

  // Rows [first, first + count) of a matrix of GGUF shape [cols, rows] as f32 values (for
  // matrices rearranged at load); only those rows' bytes are read.
  Result<std::vector<float>> row_values(const std::string& name, int64_t rows, int64_t cols,
                                        int64_t first, int64_t count) {
    TACHYON_ASSIGN_OR_RETURN(const TensorView tensor, matrix_rows(name, rows, cols, first, count));
    std::vector<float> out(static_cast<size_t>(tensor.num_elements));
    Status status = reference::dequantize(tensor.type, tensor.data, out.data(), tensor.num_elements);
    if (!status.ok()) {
      return Status(status.code(), fmt::format("tensor '{}': {}", tensor.name, status.message()));
    }
    return out;
  }

  // Whether the file has `name` (errors, e.g. an unusable type, surface when it is loaded).
  bool has(const std::string& name) const {
    Result<std::optional<TensorView>> tensor = lookup_(name);
    return !tensor.ok() || tensor->has_value();
  }

 private:
  // The matrix as the kernels use it: quantized if asked, copied and repacked.
  Result<kernels::WeightMatrix> working_copy(TensorView tensor, int64_t rows, int64_t cols,
                                             bool may_quantize = true) {
    if (!kernels::matmul_supports(tensor.type)) {
      return unsupported(fmt::format("tensor '{}' has type {}, which tachyon cannot compute with "
                                     "yet",
                                     tensor.name, dtype_name(tensor.type)));
    }
    if (may_quantize) TACHYON_RETURN_IF_ERROR(quantize_if_asked(tensor, rows, cols));
    kernels::WeightMatrix w{tensor.type, tensor.data, rows, cols};
    // Copied once into huge pages (HugePageArena: every token streams these), repacked on the
    // way where the SIMD kernels have a layout for the type (TACHYON_NO_REPACK=1 keeps the
    // file's layout, to compare; so does the portable level, whose kernels read only that). A
    // repacked matrix's `data` stays the file's (the reference and llama.cpp-arithmetic kernels
    // read that layout).
    static const bool repack =
        std::getenv("TACHYON_NO_REPACK") == nullptr &&
        kernels::active_kernel_level() != kernels::KernelLevel::kReference;
    HugePageArena& arena = arena_ != nullptr ? *arena_ : *weights_.arena;
    if (repack && kernels::RepackedWeights::supports(w)) {
      uint8_t* packed = arena.allocate(kernels::RepackedWeights::packed_bytes(w));
      kernels::RepackedWeights::repack_into(w, packed);
      w.packed = packed;
    } else {
      const size_t bytes = w.row_bytes() * static_cast<size_t>(rows);
      uint8_t* copy = arena.allocate(bytes);
      std::memcpy(copy, w.data, bytes);
      w.data = copy;
    }
    return w;
  }

 public:
  // A vector of `size` values as f32, copied (so that nothing but the experts of --experts-mem
  // is read from the mapping after load; converted when stored in another type).
  Result<const float*> vector(const std::string& name, int64_t size) {
    TACHYON_ASSIGN_OR_RETURN(const TensorView tensor, find(name));
    // A vector may be stored as a one-row matrix (Qwen2-MoE's shared expert gate).
    const bool one_row = tensor.shape.size() == 2 && tensor.shape[1] == 1;
    if (tensor.num_elements != size || (tensor.shape.size() != 1 && !one_row)) {
      return corrupt_data(fmt::format("tensor '{}' has shape [{}], expected [{}]", tensor.name,
                                      fmt::join(tensor.shape, ", "), size));
    }
    auto converted = std::make_unique<std::vector<float>>(size);
    Status status = reference::dequantize(tensor.type, tensor.data, converted->data(), size);
    if (!status.ok()) {
      return Status(status.code(), fmt::format("tensor '{}': {}", tensor.name, status.message()));
    }
    const float* data = converted->data();
    weights_.converted_vectors.push_back(std::move(converted));
    return data;
  }

 private:
  // The matrix `name` of GGUF shape [cols, rows], checked, or (count >= 0) its rows [first,
  // first + count) only.
  Result<TensorView> matrix_rows(const std::string& name, int64_t rows, int64_t cols,
                                 int64_t first, int64_t count) const {
    TACHYON_ASSIGN_OR_RETURN(TensorView tensor, find(name));
    if (tensor.shape.size() != 2 || tensor.shape[0] != cols || tensor.shape[1] != rows) {
      return corrupt_data(fmt::format("tensor '{}' has shape [{}], expected [{}, {}]", tensor.name,
                                      fmt::join(tensor.shape, ", "), cols, rows));
    }
    if (count < 0 || (first == 0 && count == rows)) return tensor;
    const DTypeInfo& info = dtype_info(tensor.type);
    if (info.block_elements == 0 || cols % info.block_elements != 0) return cannot_compute(tensor);
    const size_t row_bytes = static_cast<size_t>(cols / info.block_elements) * info.block_bytes;
    tensor.data += row_bytes * static_cast<size_t>(first);
    tensor.shape = {cols, count};
    tensor.num_elements = cols * count;
    return tensor;
  }

  static Status cannot_compute(const TensorView& tensor) {
    return unsupported(fmt::format("tensor '{}' has type {}, which tachyon cannot compute with yet",
                                   tensor.name, dtype_name(tensor.type)));
  }

  Result<TensorView> find(const std::string& name) const {
    TACHYON_ASSIGN_OR_RETURN(std::optional<TensorView> tensor, lookup_(name));
    if (!tensor) return corrupt_data(fmt::format("tensor '{}' is missing", name));
    return std::move(*tensor);
  }

  // With --quantize, a float matrix becomes that type, row by row (one row of f32 at a time).
  // K-quant rows that are no whole number of super-blocks fall back as llama.cpp's quantizer
  // falls back (Q4_K to Q5_0, Q6_K to Q8_0); rows of no whole 32-value blocks stay as stored.
  Status quantize_if_asked(TensorView& tensor, int64_t rows, int64_t cols) {
    const bool float_matrix = tensor.type == DType::kF32 || tensor.type == DType::kF16 ||
                              tensor.type == DType::kBF16;
    if (!quantize_ || !float_matrix) return Status();
    // The router stays as stored, as llama.cpp's quantizer leaves it: its scores choose the
    // experts, and an 8-bit router would choose others.
    if (tensor.name.ends_with("ffn_gate_inp.weight") || tensor.name.ends_with("mlp.gate.weight")) {
      return Status();
    }
    DType target = *quantize_;
    if (cols % dtype_info(target).block_elements != 0) {
      if (target == DType::kQ4_K) target = DType::kQ5_0;
      if (target == DType::kQ6_K) target = DType::kQ8_0;
    }
    const int64_t block = dtype_info(target).block_elements;
    if (cols % block != 0) return Status();  // no whole blocks: kept as stored, as llama.cpp does
    const size_t in_row = static_cast<size_t>(cols) * dtype_info(tensor.type).block_bytes;
    const size_t out_row = static_cast<size_t>(cols / block) * dtype_info(target).block_bytes;
    auto quantized = std::make_unique<std::vector<uint8_t>>(out_row * rows);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      TACHYON_RETURN_IF_ERROR(reference::dequantize(tensor.type, tensor.data + r * in_row,
                                                    row.data(), cols));
      TACHYON_RETURN_IF_ERROR(reference::quantize_weights(target, row.data(), cols,
                                                          quantized->data() + r * out_row));
    }
    tensor.type = target;
    tensor.data = quantized->data();
    weights_.converted_bytes.push_back(std::move(quantized));
    return Status();
  }

  TensorLookup lookup_;
  DecoderWeights& weights_;
  std::optional<DType> quantize_;
  bool experts_in_file_ = false;
  HugePageArena* arena_ = nullptr;
};

// GGUF: the names are the loader's.
TensorLookup gguf_lookup(const GgufFile& file) {
  return [&file](const std::string& name) -> Result<std::optional<TensorView>> {
    const GgufTensorInfo* tensor = file.find_tensor(name);
    if (tensor == nullptr) return std::optional<TensorView>();
    return std::optional<TensorView>(TensorView{tensor->name, tensor->type, tensor->shape,
                                                static_cast<int64_t>(tensor->num_elements),
                                                tensor->data});
  };
}

// The Hugging Face parameter name for a GGUF tensor name (or an expert's, "<name>#<expert>"),
// or empty.
std::string hf_tensor_name(const std::string& gguf_name, const ModelConfig& config) {
  static const std::map<std::string, std::string, std::less<>> kGlobal = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
      {"nextn.eh_proj.weight", "eh_proj.weight"},
      {"nextn.enorm.weight", "enorm.weight"},
      {"nextn.hnorm.weight", "hnorm.weight"},
      {"nextn.embed_tokens.weight", "embed_tokens.weight"},
      {"nextn.shared_head_head.weight", "shared_head.head.weight"},
      {"nextn.shared_head_norm.weight", "shared_head.norm.weight"}};
  if (auto it = kGlobal.find(gguf_name); it != kGlobal.end()) return it->second;
  // blk.N.rest -> model.layers.N.<rest's name>
  const size_t dot = gguf_name.find('.', 4);
  if (gguf_name.rfind("blk.", 0) != 0 || dot == std::string::npos) return "";
  const std::string layer = "model.layers." + gguf_name.substr(4, dot - 4) + ".";
  const std::string_view rest = std::string_view(gguf_name).substr(dot + 1);
  // Mixtral keeps its MoE under block_sparse_moe, with w1 (gate), w3 (up), w2 (down).
  const bool mixtral = config.architecture == "llama" && config.moe.enabled();
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) {
    static const std::map<std::string, std::pair<std::string, std::string>, std::less<>>
        kExperts = {{"ffn_gate_exps.weight", {"gate_proj", "w1"}},
                    {"ffn_up_exps.weight", {"up_proj", "w3"}},
                    {"ffn_down_exps.weight", {"down_proj", "w2"}}};
    auto it = kExperts.find(rest.substr(0, hash));
    if (it == kExperts.end()) return "";
    const std::string expert(rest.substr(hash + 1));
    return mixtral ? layer + "block_sparse_moe.experts." + expert + "." + it->second.second +
                         ".weight"
                   : layer + "mlp.experts." + expert + "." + it->second.first + ".weight";
  }
  if (mixtral && rest == "ffn_gate_inp.weight") return layer + "block_sparse_moe.gate.weight";
  // Gemma's four norms per layer: before and after attention, before and after the FFN.
  if (config.architecture == "gemma3") {
    static const std::map<std::string, std::string, std::less<>> kGemmaNorms = {
        {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
    if (auto it = kGemmaNorms.find(rest); it != kGemmaNorms.end()) return layer + it->second;
  }
  // Qwen2-MoE has one shared expert, behind a gate.
  if (config.architecture == "qwen2moe") {
    static const std::map<std::string, std::string, std::less<>> kShared = {
        {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
        {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
        {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
        {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}};
    if (auto it = kShared.find(rest); it != kShared.end()) return layer + it->second;
  }
  auto it = kLayer.find(rest);
  if (it == kLayer.end()) return "";
  return layer + it->second;
}

// A block-scaled F8_E4M3 matrix (DeepSeek-V3 / Kimi-K2 checkpoints) as BF16, as the models' own
// code dequantizes it: each value times its block's f32 scale from `<name>_scale_inv`, rounded
// to BF16. The block size is config.json's quantization_config.weight_block_size (default
// 128x128). The copy is kept by `weights`.
Result<const uint8_t*> fp8_as_bf16(const HfCheckpoint& checkpoint, const SafetensorsTensor& tensor,
                                  DecoderWeights& weights) {
  if (tensor.shape.size() != 2) {
    return unsupported(fmt::format("tensor '{}' is F8_E4M3 with shape of {} dimensions; tachyon "
                                   "takes FP8 matrices only",
                                   tensor.name, tensor.shape.size()));
  }
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  if (const boost::json::value* quantization = checkpoint.config().if_contains("quantization_config")) {
    const boost::json::value* block =
        quantization->is_object() ? quantization->get_object().if_contains("weight_block_size")
                                  : nullptr;
    if (block != nullptr) {
      if (!block->is_array() || block->get_array().size() != 2 ||
          !block->get_array()[0].is_int64() || !block->get_array()[1].is_int64() ||
          block->get_array()[0].get_int64() <= 0 || block->get_array()[1].get_int64() <= 0) {
        return corrupt_data(fmt::format("config.json quantization_config.weight_block_size is "
                                        "{}, expected [rows, cols]",
                                        boost::json::serialize(*block)));
      }
      block_rows = block->get_array()[0].get_int64();
      block_cols = block->get_array()[1].get_int64();
    }
  }
  if (block_rows != block_cols) {
    return unsupported(fmt::format("FP8 blocks of {}x{}: tachyon takes square blocks", block_rows,
                                   block_cols));
  }
  const std::string scale_name = tensor.name + "_scale_inv";
  const SafetensorsTensor* scale = checkpoint.find_tensor(scale_name);
  if (scale == nullptr || scale->dtype != SafetensorsDType::kF32 || scale->shape.size() != 2) {
    return corrupt_data(fmt::format("F8_E4M3 tensor '{}' needs an F32 matrix '{}' of block "
                                    "scales",
                                    tensor.name, scale_name));
  }
  const int64_t rows = tensor.shape[0];
  const int64_t cols = tensor.shape[1];
  std::vector<float> scales(scale->num_elements);
  std::memcpy(scales.data(), scale->data, scales.size() * sizeof(float));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  Status status = reference::dequantize_fp8_e4m3_blocks(tensor.data, rows, cols, scales.data(),
                                                        scale->shape[0], scale->shape[1],
                                                        block_rows, values.data());
  if (!status.ok()) {
    return Status(status.code(), fmt::format("tensor '{}': {}", tensor.name, status.message()));
  }
  auto bf16 = std::make_unique<std::vector<uint8_t>>(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = f32_to_bf16(values[i]);
    std::memcpy(bf16->data() + 2 * i, &bits, 2);
  }
  const uint8_t* data = bf16->data();
  weights.converted_bytes.push_back(std::move(bf16));
  return data;
}

// Hugging Face: the names mapped, dimensions reversed (row-major [out, in] is ggml's [in, out]),
// and for the llama layout the Q/K rows of each head interleaved as llama.cpp's converter
// stores them (HF rotates dimension j with j + D/2, the llama layout adjacent pairs), in a copy
// kept by `weights`: the same bytes as the GGUF file of the same weights, so the same logits.
TensorLookup hf_lookup(const HfCheckpoint& checkpoint, const ModelConfig& config,
                       DecoderWeights& weights) {
  return [&checkpoint, &config, &weights](
             const std::string& name) -> Result<std::optional<TensorView>> {
    if (name == "rope_freqs.weight") {  // llama3 scaling: computed from config.json
      TACHYON_ASSIGN_OR_RETURN(std::vector<float> factors,
                               llama3_frequency_factors(checkpoint, config));
      auto stored = std::make_unique<std::vector<float>>(std::move(factors));
      TensorView view{"rope_scaling (config.json)", DType::kF32,
                      {static_cast<int64_t>(stored->size())},
                      static_cast<int64_t>(stored->size()),
                      reinterpret_cast<const uint8_t*>(stored->data())};
      weights.converted_vectors.push_back(std::move(stored));
      return std::optional<TensorView>(view);
    }
    const std::string hf_name = hf_tensor_name(name, config);
    if (hf_name.empty()) return std::optional<TensorView>();
    const SafetensorsTensor* tensor = checkpoint.find_tensor(hf_name);
    if (tensor == nullptr) {
      return corrupt_data(fmt::format("tensor '{}' is missing from {}", hf_name, checkpoint.dir()));
    }
    TensorView view{hf_name, DType::kF32, {tensor->shape.rbegin(), tensor->shape.rend()},
                    static_cast<int64_t>(tensor->num_elements), tensor->data};
    switch (tensor->dtype) {
      case SafetensorsDType::kF32: view.type = DType::kF32; break;
      case SafetensorsDType::kF16: view.type = DType::kF16; break;
      case SafetensorsDType::kBF16: view.type = DType::kBF16; break;
      case SafetensorsDType::kF8E4M3: {
        TACHYON_ASSIGN_OR_RETURN(view.data, fp8_as_bf16(checkpoint, *tensor, weights));
        view.type = DType::kBF16;
        break;
      }
      default:
        return unsupported(fmt::format("tensor '{}' in {} is {}; tachyon loads F32, F16, BF16 and "
                                       "block-scaled F8_E4M3 tensors from safetensors",
                                       hf_name, checkpoint.shard_of(hf_name),
                                       safetensors_dtype_name(tensor->dtype)));
    }
    if (config.architecture == "gemma3" && name.ends_with("norm.weight")) {
      // Gemma's RMSNorms multiply by (1 + weight); llama.cpp's converter stores 1 + weight.
      auto shifted = std::make_unique<std::vector<float>>(view.num_elements);
      TACHYON_RETURN_IF_ERROR(
          reference::dequantize(view.type, view.data, shifted->data(), view.num_elements));
      for (float& value : *shifted) value += 1.0f;
      view.type = DType::kF32;
      view.data = reinterpret_cast<const uint8_t*>(shifted->data());
      weights.converted_vectors.push_back(std::move(shifted));
      return std::optional<TensorView>(view);
    }
    const bool query = name.ends_with("attn_q.weight");
    if (config.rope.layout == RopeLayout::kAdjacentPairs && !config.mla.enabled() &&
        (query || name.ends_with("attn_k.weight")) && view.shape.size() == 2) {
      const int heads = query ? config.num_heads : config.num_kv_heads;
      const int64_t rows = view.shape[1];
      if (rows % (2 * heads) != 0) {
        return corrupt_data(fmt::format("tensor '{}' has {} rows, not {} heads of pairs", hf_name,
                                        rows, heads));
      }
      const int64_t head = rows / heads;
      const size_t row_bytes =
          static_cast<size_t>(view.shape[0]) * (view.type == DType::kF32 ? 4 : 2);
      auto copy = std::make_unique<std::vector<uint8_t>>(row_bytes * rows);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < head / 2; ++j) {
          for (int64_t half = 0; half < 2; ++half) {
            const int64_t from = h * head + half * (head / 2) + j;  // HF row
            const int64_t to = h * head + 2 * j + half;             // GGUF row
            std::memcpy(copy->data() + to * row_bytes, view.data + from * row_bytes, row_bytes);
          }
        }
      }
      view.data = copy->data();
      weights.converted_bytes.push_back(std::move(copy));
    }
    return std::optional<TensorView>(view);
  };
}

// A layer's MLA projections (`prefix`: "blk.N."): the latent's whole, the queries of `shard`'s
// heads only (the per-head matrices of the others stay empty).
Status load_latent_attention(TensorLoader& load, const ModelConfig& config,
                             const ModelShard& shard, const std::string& prefix,
                             LatentAttentionWeights& mla) {
  const LatentAttentionConfig& shape = config.mla;
  const int heads = config.num_heads;
  const int64_t hidden = config.hidden_size;
  const int64_t query_rows = static_cast<int64_t>(heads) * shape.qk_head_dim();
  const int64_t first_row = static_cast<int64_t>(shard.first_head()) * shape.qk_head_dim();
  const int64_t local_rows = static_cast<int64_t>(shard.local_heads()) * shape.qk_head_dim();
  if (shape.q_lora_rank > 0) {
    TACHYON_ASSIGN_OR_RETURN(mla.query_a,
                             load.matrix(prefix + "attn_q_a.weight", shape.q_lora_rank, hidden));
    TACHYON_ASSIGN_OR_RETURN(mla.query_a_norm,
                             load.vector(prefix + "attn_q_a_norm.weight", shape.q_lora_rank));
    TACHYON_ASSIGN_OR_RETURN(mla.query_b, load.matrix(prefix + "attn_q_b.weight", query_rows,
                                                      shape.q_lora_rank, first_row, local_rows));
  } else {
    TACHYON_ASSIGN_OR_RETURN(mla.query, load.matrix(prefix + "attn_q.weight", query_rows, hidden,
                                                    first_row, local_rows));
  }
  TACHYON_ASSIGN_OR_RETURN(
      mla.kv_a, load.matrix(prefix + "attn_kv_a_mqa.weight", shape.latent_size(), hidden));
  TACHYON_ASSIGN_OR_RETURN(mla.kv_a_norm,
                           load.vector(prefix + "attn_kv_a_norm.weight", shape.kv_lora_rank));
  const int64_t latent = shape.kv_lora_rank;
  const int64_t nope = shape.qk_nope_head_dim;
  const int64_t value = shape.v_head_dim;
  const std::function<bool(int)> own = [&shard](int h) { return shard.owns_head(h); };
  if (load.has(prefix + "attn_k_b.weight")) {  // llama.cpp's current deepseek2 files
    TACHYON_ASSIGN_OR_RETURN(mla.key_absorb, load.matrices(prefix + "attn_k_b.weight", heads,
                                                           latent, nope, false, own));
    TACHYON_ASSIGN_OR_RETURN(mla.value_up, load.matrices(prefix + "attn_v_b.weight", heads, value,
                                                         latent, false, own));
    return Status();
  }
  // kv_b: per head, nope rows of W_UK then value rows of W_UV, each kv_lora_rank wide (only
  // this rank's heads' rows are read).
  const int64_t head_rows = nope + value;
  TACHYON_ASSIGN_OR_RETURN(std::vector<float> kv_b,
                           load.row_values(prefix + "attn_kv_b.weight", heads * head_rows, latent,
                                           shard.first_head() * head_rows,
                                           shard.local_heads() * head_rows));
  for (int h = 0; h < heads; ++h) {
    if (!own(h)) {
      mla.key_absorb.emplace_back();
      mla.value_up.emplace_back();
      continue;
    }
    const float* head = kv_b.data() + (h - shard.first_head()) * head_rows * latent;
    std::vector<float> key_absorb(latent * nope);  // transposed: [latent, nope]
    for (int64_t n = 0; n < nope; ++n) {
      for (int64_t c = 0; c < latent; ++c) key_absorb[c * nope + n] = head[n * latent + c];
    }
    mla.key_absorb.push_back(load.computed_matrix(
        fmt::format("{}attn_kv_b.weight (head {} keys)", prefix, h), std::move(key_absorb),
        latent, nope));
    mla.value_up.push_back(load.computed_matrix(
        fmt::format("{}attn_kv_b.weight (head {} values)", prefix, h),
        std::vector<float>(head + nope * latent, head + (nope + value) * latent), value, latent));
  }
  return Status();
}

// Model layer `layer`'s routed experts (`prefix`: "blk.N."), of them only `shard`'s: in memory
// of the layer's own (ExpertWeights::routed_memory), so that a new placement can free them.
Status load_routed_experts(TensorLoader& load, const ModelConfig& config, const ModelShard& shard,
                           int layer, const std::string& prefix, ExpertWeights& experts) {
  const MixtureOfExpertsConfig& moe = config.moe;
  const int64_t hidden = config.hidden_size;
  const bool in_file = load.experts_in_file();
  const std::function<bool(int)> own = [&shard, layer](int e) {
    return shard.owns_expert(layer, e);
  };
  experts.routed_memory = in_file ? nullptr : std::make_shared<HugePageArena>();
  load.set_arena(experts.routed_memory.get());
  Status status = [&]() -> Status {
    TACHYON_ASSIGN_OR_RETURN(experts.gate, load.matrices(prefix + "ffn_gate_exps.weight",
                                                         moe.num_experts, moe.expert_ffn_size,
                                                         hidden, in_file, own));
    TACHYON_ASSIGN_OR_RETURN(experts.up, load.matrices(prefix + "ffn_up_exps.weight",
                                                       moe.num_experts, moe.expert_ffn_size,
                                                       hidden, in_file, own));
    TACHYON_ASSIGN_OR_RETURN(experts.down, load.matrices(prefix + "ffn_down_exps.weight",
                                                         moe.num_experts, hidden,
                                                         moe.expert_ffn_size, in_file, own));
    return Status();
  }();
  load.set_arena(nullptr);
  return status;
}

// A layer's router and experts (`prefix`: "blk.N."): of the routed ones only `shard`'s.
Status load_experts(TensorLoader& load, const ModelConfig& config, const ModelShard& shard,
                    int layer, const std::string& prefix, ExpertWeights& experts) {
  const MixtureOfExpertsConfig& moe = config.moe;
  const int64_t hidden = config.hidden_size;
  TACHYON_ASSIGN_OR_RETURN(experts.router,
                           load.matrix(prefix + "ffn_gate_inp.weight", moe.num_experts, hidden));
  if (moe.has_selection_bias) {
    TACHYON_ASSIGN_OR_RETURN(experts.selection_bias,
                             load.vector(prefix + "exp_probs_b.bias", moe.num_experts));
  }
  TACHYON_RETURN_IF_ERROR(load_routed_experts(load, config, shard, layer, prefix, experts));
  if (moe.shared_ffn_size > 0) {
    TACHYON_ASSIGN_OR_RETURN(experts.shared_gate, load.matrix(prefix + "ffn_gate_shexp.weight",
                                                              moe.shared_ffn_size, hidden));
    TACHYON_ASSIGN_OR_RETURN(experts.shared_up, load.matrix(prefix + "ffn_up_shexp.weight",
                                                            moe.shared_ffn_size, hidden));
    TACHYON_ASSIGN_OR_RETURN(experts.shared_down, load.matrix(prefix + "ffn_down_shexp.weight",
                                                              hidden, moe.shared_ffn_size));
  }
  if (moe.shared_expert_gated) {
    TACHYON_ASSIGN_OR_RETURN(experts.shared_gate_vector,
                             load.vector(prefix + "ffn_gate_inp_shexp.weight", hidden));
  }
  return Status();
}

// Layer `i`'s attention and feed-forward weights (a trunk layer or, past them, an MTP layer's):
// of the dense ones only `shard`'s rows (its heads, its FFN rows, its hidden rows).
Status load_layer(TensorLoader& load, const ModelConfig& config, const ModelShard& shard, int i,
                  LayerWeights& layer) {
  const int64_t hidden = config.hidden_size;
  const std::string prefix = fmt::format("blk.{}.", i);
  TACHYON_ASSIGN_OR_RETURN(layer.attention_norm, load.vector(prefix + "attn_norm.weight", hidden));
  if (config.mla.enabled()) {
    TACHYON_RETURN_IF_ERROR(load_latent_attention(load, config, shard, prefix, layer.mla));
    TACHYON_ASSIGN_OR_RETURN(
        layer.attention_output,
        load.matrix(prefix + "attn_output.weight", hidden,
                    static_cast<int64_t>(config.num_heads) * config.mla.v_head_dim,
                    shard.hidden_rows.first(shard.tp_rank), shard.hidden_rows.count(shard.tp_rank)));
  } else {
    // The rank's KV heads' rows, and their query heads' (a KV head's group follows it).
    const int64_t kv_first = static_cast<int64_t>(shard.first_kv_head()) * config.head_size;
    const int64_t kv_rows = static_cast<int64_t>(shard.local_kv_heads()) * config.head_size;
    const int64_t group = config.num_heads / config.num_kv_heads;
    TACHYON_ASSIGN_OR_RETURN(layer.query, load.matrix(prefix + "attn_q.weight", config.q_size(),
                                                      hidden, kv_first * group, kv_rows * group));
    TACHYON_ASSIGN_OR_RETURN(layer.key, load.matrix(prefix + "attn_k.weight", config.kv_size(),
                                                    hidden, kv_first, kv_rows));
    TACHYON_ASSIGN_OR_RETURN(layer.value, load.matrix(prefix + "attn_v.weight", config.kv_size(),
                                                      hidden, kv_first, kv_rows));
    TACHYON_ASSIGN_OR_RETURN(
        layer.attention_output,
        load.matrix(prefix + "attn_output.weight", hidden, config.q_size(),
                    shard.hidden_rows.first(shard.tp_rank), shard.hidden_rows.count(shard.tp_rank)));
    if (config.qkv_bias) {
      TACHYON_ASSIGN_OR_RETURN(layer.query_bias,
                               load.vector(prefix + "attn_q.bias", config.q_size()));
      TACHYON_ASSIGN_OR_RETURN(layer.key_bias, load.vector(prefix + "attn_k.bias", config.kv_size()));
      TACHYON_ASSIGN_OR_RETURN(layer.value_bias,
                               load.vector(prefix + "attn_v.bias", config.kv_size()));
      layer.query_bias += kv_first * group;
      layer.key_bias += kv_first;
      layer.value_bias += kv_first;
    }
  }
  if (config.qk_norm) {
    TACHYON_ASSIGN_OR_RETURN(layer.query_norm,
                             load.vector(prefix + "attn_q_norm.weight", config.head_size));
    TACHYON_ASSIGN_OR_RETURN(layer.key_norm,
                             load.vector(prefix + "attn_k_norm.weight", config.head_size));
  }
  TACHYON_ASSIGN_OR_RETURN(layer.ffn_norm, load.vector(prefix + "ffn_norm.weight", hidden));
  if (config.post_norms) {
    TACHYON_ASSIGN_OR_RETURN(layer.post_attention_norm,
                             load.vector(prefix + "post_attention_norm.weight", hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.post_ffn_norm,
                             load.vector(prefix + "post_ffw_norm.weight", hidden));
  }
  if (config.moe.layer_has_experts(i)) {
    layer.has_experts = true;
    layer.experts.model_layer = i;
    TACHYON_RETURN_IF_ERROR(load_experts(load, config, shard, i, prefix, layer.experts));
  } else {
    const int64_t ffn_first = shard.ffn_rows.first(shard.tp_rank);
    const int64_t ffn_rows = shard.ffn_rows.count(shard.tp_rank);
    TACHYON_ASSIGN_OR_RETURN(layer.gate, load.matrix(prefix + "ffn_gate.weight", config.ffn_size,
                                                     hidden, ffn_first, ffn_rows));
    TACHYON_ASSIGN_OR_RETURN(layer.up, load.matrix(prefix + "ffn_up.weight", config.ffn_size,
                                                   hidden, ffn_first, ffn_rows));
    TACHYON_ASSIGN_OR_RETURN(
        layer.down,
        load.matrix(prefix + "ffn_down.weight", hidden, config.ffn_size,
                    shard.hidden_rows.first(shard.tp_rank), shard.hidden_rows.count(shard.tp_rank)));
  }
  return Status();
}

// MTP layer `i` (numbered after the trunk's layers): its decoder layer and the NextN parts.
Status load_mtp_layer(TensorLoader& load, const ModelConfig& config, const DecoderWeights& trunk,
                      int i, MtpLayerWeights& mtp) {
  const int64_t hidden = config.hidden_size;
  const std::string prefix = fmt::format("blk.{}.nextn.", i);
  TACHYON_RETURN_IF_ERROR(load_layer(load, config, ModelShard::whole(config), i, mtp.layer));
  TACHYON_ASSIGN_OR_RETURN(mtp.eh_proj, load.matrix(prefix + "eh_proj.weight", hidden, 2 * hidden));
  TACHYON_ASSIGN_OR_RETURN(mtp.enorm, load.vector(prefix + "enorm.weight", hidden));
  TACHYON_ASSIGN_OR_RETURN(mtp.hnorm, load.vector(prefix + "hnorm.weight", hidden));
  if (load.has(prefix + "shared_head_norm.weight")) {
    TACHYON_ASSIGN_OR_RETURN(mtp.head_norm, load.vector(prefix + "shared_head_norm.weight", hidden));
  } else {
    mtp.head_norm = trunk.output_norm;
  }
  mtp.embedding = trunk.token_embedding;
  if (load.has(prefix + "embed_tokens.weight")) {
    TACHYON_ASSIGN_OR_RETURN(mtp.embedding,
                             load.matrix(prefix + "embed_tokens.weight", config.vocab_size, hidden));
  }
  mtp.head = trunk.output;
  if (load.has(prefix + "shared_head_head.weight")) {
    TACHYON_ASSIGN_OR_RETURN(mtp.head, load.matrix(prefix + "shared_head_head.weight",
                                                   config.vocab_size, hidden));
  }
  return Status();
}

// The tensors of `config`'s decoder, by GGUF name: those of `shard`'s layers and rows.
Status load_tensors(const TensorLookup& lookup, const ModelConfig& config,
                    std::optional<DType> quantize, bool experts_in_file, const ModelShard& shard,
                    DecoderWeights& weights) {
  if (quantize && !reference::can_quantize_weights(*quantize)) {
    return unsupported(fmt::format("--quantize {}: tachyon quantizes to Q4_0, Q4_1, Q5_0, Q5_1, "
                                   "Q8_0, Q4_K and Q6_K",
                                   dtype_name(*quantize)));
  }
  TensorLoader load(lookup, weights, quantize, experts_in_file);
  const int64_t hidden = config.hidden_size;
  // The first stage embeds, the last one projects: each its TP rank's vocabulary rows.
  const int64_t vocab_first = shard.vocab_rows.first(shard.tp_rank);
  const int64_t vocab_rows = shard.vocab_rows.count(shard.tp_rank);
  if (shard.distributed() && !(shard.last_stage() && config.tied_embeddings)) {
    // Only looked up: its rows stay in the file (no working copy of a table no product reads),
    // unless --quantize asks for them as one process quantizes its table (the same bits).
    if (shard.first_stage() && quantize) {
      TACHYON_ASSIGN_OR_RETURN(weights.token_embedding,
                               load.matrix("token_embd.weight", config.vocab_size, hidden,
                                           vocab_first, vocab_rows));
    } else if (shard.first_stage()) {
      TACHYON_ASSIGN_OR_RETURN(weights.token_embedding,
                               load.file_rows("token_embd.weight", config.vocab_size, hidden,
                                              vocab_first, vocab_rows));
    }
  } else {
    TACHYON_ASSIGN_OR_RETURN(weights.token_embedding,
                             load.matrix("token_embd.weight", config.vocab_size, hidden,
                                         vocab_first, vocab_rows));
  }
  if (experts_in_file && weights.token_embedding.packed != nullptr) {
    // Embedding rows are read in the file's layout (DecoderModel::embed): a copy of their own,
    // so that after load only the experts come from the file.
    kernels::WeightMatrix& table = weights.token_embedding;
    const size_t bytes = table.row_bytes() * static_cast<size_t>(table.rows);
    uint8_t* copy = weights.arena->allocate(bytes);
    std::memcpy(copy, table.data, bytes);
    table.data = copy;
  }
  TACHYON_ASSIGN_OR_RETURN(weights.output_norm, load.vector("output_norm.weight", hidden));
  if (!shard.last_stage()) {
    // No output projection on this stage.
  } else if (config.tied_embeddings) {
    weights.output = weights.token_embedding;
  } else {
    TACHYON_ASSIGN_OR_RETURN(weights.output, load.matrix("output.weight", config.vocab_size,
                                                         hidden, vocab_first, vocab_rows));
  }
  if (!shard.first_stage()) weights.token_embedding = kernels::WeightMatrix();
  if (config.rope.has_frequency_factors) {
    const int pairs = config.rope.dimensions / 2;
    TACHYON_ASSIGN_OR_RETURN(const float* factors, load.vector("rope_freqs.weight", pairs));
    weights.rope_frequency_factors.assign(factors, factors + pairs);
  }

  // Layers of other stages stay empty.
  weights.layers.resize(config.num_layers);
  for (int i = shard.first_layer; i < shard.end_layer; ++i) {
    TACHYON_RETURN_IF_ERROR(load_layer(load, config, shard, i, weights.layers[i]));
  }
  // MTP layers (speculative decoding's proposer) run in one process only.
  for (int k = 0; k < (shard.distributed() ? 0 : config.num_mtp_layers); ++k) {
    MtpLayerWeights mtp;
    TACHYON_RETURN_IF_ERROR(load_mtp_layer(load, config, weights, config.num_layers + k, mtp));
    weights.mtp_layers.push_back(mtp);
  }
  weights.experts_per_token = config.moe.experts_per_token;
  weights.set_decode_prefetch();
  return Status();
}

}  // namespace

Result<DecoderWeights> DecoderWeights::load(const GgufFile& file, const ModelConfig& config,
                                            std::optional<DType> quantize,
                                            const MemoryAmount& experts_memory,
                                            const ModelShard* shard) {
  DecoderWeights weights;
  const ModelShard part = shard != nullptr ? *shard : ModelShard::whole(config);
  const bool experts_in_file = !experts_memory.empty();
  if (experts_in_file) {
    if (!config.moe.enabled()) {
      return invalid_argument("--experts-mem is for models with routed experts; this one has none");
    }
    if (quantize) {
      return invalid_argument("--experts-mem reads the experts as the file stores them; it does "
                              "not go with --quantize");
    }
    if (!file.mapped()) return invalid_argument("--experts-mem needs a model file");
  }
  TACHYON_RETURN_IF_ERROR(load_tensors(gguf_lookup(file), config, quantize, experts_in_file,
                                       part, weights));
  weights.quantize = quantize;
  if (experts_in_file) {
    static const bool repack = std::getenv("TACHYON_NO_REPACK") == nullptr;
    TACHYON_ASSIGN_OR_RETURN(weights.expert_cache,
                             ExpertCache::open(file.path(), file.bytes(), repack));
    auto add = [&](ExpertWeights& experts) {
      experts.cache_layer = weights.expert_cache->add_layer(experts.gate, experts.up, experts.down);
    };
    for (LayerWeights& layer : weights.layers) {
      if (layer.has_experts) add(layer.experts);
    }
    for (MtpLayerWeights& mtp : weights.mtp_layers) {
      if (mtp.layer.has_experts) add(mtp.layer.experts);
    }
    TACHYON_RETURN_IF_ERROR(weights.expert_cache->allocate(experts_memory));
  }
  return weights;
}

Status DecoderWeights::reload_experts(const GgufFile& file, const ModelConfig& config,
                                      const ModelShard& shard) {
  if (expert_cache) return unsupported("--experts-mem reads experts from the file as chosen");
  TensorLoader load(gguf_lookup(file), *this, quantize, /*experts_in_file=*/false);
  for (LayerWeights& layer : layers) {
    if (!layer.has_experts) continue;
    // The layer's new experts first, then its old ones freed (one layer's worth more memory
    // at a time).
    ExpertWeights fresh;
    const int index = layer.experts.model_layer;
    TACHYON_RETURN_IF_ERROR(load_routed_experts(load, config, shard, index,
                                                fmt::format("blk.{}.", index), fresh));
    layer.experts.gate = std::move(fresh.gate);
    layer.experts.up = std::move(fresh.up);
    layer.experts.down = std::move(fresh.down);
    layer.experts.routed_memory = std::move(fresh.routed_memory);
  }
  set_decode_prefetch();
  return Status();
}

size_t DecoderWeights::resident_bytes() const {
  size_t bytes = arena->allocated_bytes();
  auto add = [&bytes](const ExpertWeights& experts) {
    if (experts.routed_memory) bytes += experts.routed_memory->allocated_bytes();
  };
  for (const LayerWeights& layer : layers) add(layer.experts);
  for (const MtpLayerWeights& mtp : mtp_layers) add(mtp.layer.experts);
  return bytes;
}

Result<DecoderWeights> DecoderWeights::load(const HfCheckpoint& checkpoint,
                                            const ModelConfig& config,
                                            std::optional<DType> quantize,
                                            const ModelShard* shard) {
  DecoderWeights weights;
  const ModelShard part = shard != nullptr ? *shard : ModelShard::whole(config);
  TACHYON_RETURN_IF_ERROR(
      load_tensors(hf_lookup(checkpoint, config, weights), config, quantize,
                   /*experts_in_file=*/false, part, weights));
  return weights;
}

namespace {

// Calls visit(matrix, share) for every matrix a decode step reads, `share` being the fraction of
// it one token reads (the routed experts': experts_per_token of them).
template <typename Weights, typename Visit>
void for_each_decode_matrix(Weights& weights, Visit visit) {
  visit(weights.output, 1.0);
  for (auto& layer : weights.layers) {
    for (auto* w :
         {&layer.query, &layer.key, &layer.value, &layer.attention_output, &layer.gate, &layer.up,
          &layer.down, &layer.mla.query, &layer.mla.query_a, &layer.mla.query_b, &layer.mla.kv_a,
          &layer.experts.router, &layer.experts.shared_gate, &layer.experts.shared_up,
          &layer.experts.shared_down}) {
      visit(*w, 1.0);
    }
    for (auto* per_head : {&layer.mla.key_absorb, &layer.mla.value_up}) {
      for (auto& w : *per_head) visit(w, 1.0);
    }
    const double num_experts = static_cast<double>(layer.experts.gate.size());
    for (auto* per_expert : {&layer.experts.gate, &layer.experts.up, &layer.experts.down}) {
      for (auto& w : *per_expert) visit(w, weights.experts_per_token / num_experts);
    }
  }
}

}  // namespace

double DecoderWeights::decode_weight_bytes() const {
  double bytes = 0;
  for_each_decode_matrix(*this, [&](const kernels::WeightMatrix& w, double share) {
    bytes += share * static_cast<double>(w.row_bytes()) * static_cast<double>(w.rows);
  });
  return bytes;
}

void DecoderWeights::set_decode_prefetch() {
  const int64_t ahead = kernels::decode_prefetch_bytes(static_cast<int64_t>(decode_weight_bytes()));
  for_each_decode_matrix(*this,
                         [&](kernels::WeightMatrix& w, double) { w.decode_prefetch = ahead; });
  token_embedding.decode_prefetch = ahead;
}

}  // namespace tachyon
