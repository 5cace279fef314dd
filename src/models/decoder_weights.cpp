#include "models/decoder_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/repacked_weights.h"
#include "kernels/reference/dequantize.h"

namespace tachyon {
namespace {

class TensorLoader {
 public:
  TensorLoader(const GgufFile& file, DecoderWeights& weights) : file_(file), weights_(weights) {}

  // A matrix with GGUF shape [cols, rows].
  Result<kernels::WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols) {
    TACHYON_ASSIGN_OR_RETURN(const GgufTensorInfo* tensor, find(name));
    if (tensor->shape.size() != 2 || tensor->shape[0] != cols || tensor->shape[1] != rows) {
      return corrupt_data(fmt::format("tensor '{}' has shape [{}], expected [{}, {}]", name,
                                      fmt::join(tensor->shape, ", "), cols, rows));
    }
    if (!kernels::matmul_supports(tensor->type)) {
      return unsupported(fmt::format("tensor '{}' has type {}, which tachyon cannot compute with "
                                     "yet",
                                     name, dtype_name(tensor->type)));
    }
    kernels::WeightMatrix w{tensor->type, tensor->data, rows, cols};
    // Copied once into huge pages (HugePageArena: every token streams these), repacked on the
    // way where the SIMD kernels have a layout for the type (TACHYON_NO_REPACK=1 keeps the
    // file's layout, to compare). A repacked matrix's `data` stays the file's (the reference
    // and llama.cpp-arithmetic kernels read that layout).
    static const bool repack = std::getenv("TACHYON_NO_REPACK") == nullptr;
    if (repack && kernels::RepackedWeights::supports(w)) {
      uint8_t* packed = weights_.arena->allocate(kernels::RepackedWeights::packed_bytes(w));
      kernels::RepackedWeights::repack_into(w, packed);
      w.packed = packed;
    } else {
      const size_t bytes = w.row_bytes() * static_cast<size_t>(rows);
      uint8_t* copy = weights_.arena->allocate(bytes);
      std::memcpy(copy, w.data, bytes);
      w.data = copy;
    }
    return w;
  }

  // A vector of `size` values as f32 (converted once when stored in another type).
  Result<const float*> vector(const std::string& name, int64_t size) {
    TACHYON_ASSIGN_OR_RETURN(const GgufTensorInfo* tensor, find(name));
    if (static_cast<int64_t>(tensor->num_elements) != size || tensor->shape.size() != 1) {
      return corrupt_data(fmt::format("tensor '{}' has shape [{}], expected [{}]", name,
                                      fmt::join(tensor->shape, ", "), size));
    }
    if (tensor->type == DType::kF32) return reinterpret_cast<const float*>(tensor->data);
    auto converted = std::make_unique<std::vector<float>>(size);
    Status status = reference::dequantize(tensor->type, tensor->data, converted->data(), size);
    if (!status.ok()) {
      return Status(status.code(), fmt::format("tensor '{}': {}", name, status.message()));
    }
    const float* data = converted->data();
    weights_.converted_vectors.push_back(std::move(converted));
    return data;
  }

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

 private:
  Result<const GgufTensorInfo*> find(const std::string& name) const {
    const GgufTensorInfo* tensor = file_.find_tensor(name);
    if (!tensor) return corrupt_data(fmt::format("tensor '{}' is missing", name));
    return tensor;
  }

  const GgufFile& file_;
  DecoderWeights& weights_;
};

}  // namespace

Result<DecoderWeights> DecoderWeights::load(const GgufFile& file, const ModelConfig& config) {
  DecoderWeights weights;
  TensorLoader load(file, weights);
  const int64_t hidden = config.hidden_size;
  TACHYON_ASSIGN_OR_RETURN(weights.token_embedding,
                           load.matrix("token_embd.weight", config.vocab_size, hidden));
  TACHYON_ASSIGN_OR_RETURN(weights.output_norm, load.vector("output_norm.weight", hidden));
  if (config.tied_embeddings) {
    weights.output = weights.token_embedding;
  } else {
    TACHYON_ASSIGN_OR_RETURN(weights.output, load.matrix("output.weight", config.vocab_size, hidden));
  }
  if (config.rope.has_frequency_factors) {
    const int pairs = config.rope.dimensions / 2;
    TACHYON_ASSIGN_OR_RETURN(const float* factors, load.vector("rope_freqs.weight", pairs));
    weights.rope_frequency_factors.assign(factors, factors + pairs);
  }

  for (int i = 0; i < config.num_layers; ++i) {
    const std::string prefix = fmt::format("blk.{}.", i);
    LayerWeights layer;
    TACHYON_ASSIGN_OR_RETURN(layer.attention_norm, load.vector(prefix + "attn_norm.weight", hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.query, load.matrix(prefix + "attn_q.weight", config.q_size(), hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.key, load.matrix(prefix + "attn_k.weight", config.kv_size(), hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.value, load.matrix(prefix + "attn_v.weight", config.kv_size(), hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.attention_output,
                             load.matrix(prefix + "attn_output.weight", hidden, config.q_size()));
    if (config.qkv_bias) {
      TACHYON_ASSIGN_OR_RETURN(layer.query_bias, load.vector(prefix + "attn_q.bias", config.q_size()));
      TACHYON_ASSIGN_OR_RETURN(layer.key_bias, load.vector(prefix + "attn_k.bias", config.kv_size()));
      TACHYON_ASSIGN_OR_RETURN(layer.value_bias, load.vector(prefix + "attn_v.bias", config.kv_size()));
    }
    if (config.qk_norm) {
      TACHYON_ASSIGN_OR_RETURN(layer.query_norm,
                               load.vector(prefix + "attn_q_norm.weight", config.head_size));
      TACHYON_ASSIGN_OR_RETURN(layer.key_norm,
                               load.vector(prefix + "attn_k_norm.weight", config.head_size));
    }
    TACHYON_ASSIGN_OR_RETURN(layer.ffn_norm, load.vector(prefix + "ffn_norm.weight", hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.gate, load.matrix(prefix + "ffn_gate.weight", config.ffn_size, hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.up, load.matrix(prefix + "ffn_up.weight", config.ffn_size, hidden));
    TACHYON_ASSIGN_OR_RETURN(layer.down, load.matrix(prefix + "ffn_down.weight", hidden, config.ffn_size));
    weights.layers.push_back(layer);
  }
  weights.set_decode_prefetch();
  return weights;
}

void DecoderWeights::set_decode_prefetch() {
  std::vector<kernels::WeightMatrix*> streamed{&output};
  for (LayerWeights& layer : layers) {
    streamed.insert(streamed.end(), {&layer.query, &layer.key, &layer.value,
                                     &layer.attention_output, &layer.gate, &layer.up, &layer.down});
  }
  int64_t bytes = 0;
  for (const kernels::WeightMatrix* w : streamed) {
    bytes += static_cast<int64_t>(w->row_bytes()) * w->rows;
  }
  const int64_t ahead = kernels::decode_prefetch_bytes(bytes);
  for (kernels::WeightMatrix* w : streamed) w->decode_prefetch = ahead;
  token_embedding.decode_prefetch = ahead;
}

}  // namespace tachyon
