// The tensors of a Llama-family decoder, found by their GGUF names (or the Hugging Face names
// they map to) and checked against the config. Matrices stay in their stored type.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/huge_page_arena.h"
#include "kernels/cpu/matmul.h"
#include "model_files/gguf_file.h"
#include "model_files/hf_checkpoint.h"
#include "models/model_config.h"

namespace tachyon {

struct LayerWeights {
  const float* attention_norm = nullptr;  // f32 [hidden]
  kernels::WeightMatrix query;             // [q_size rows, hidden cols]
  kernels::WeightMatrix key;               // [kv_size, hidden]
  kernels::WeightMatrix value;             // [kv_size, hidden]
  kernels::WeightMatrix attention_output;  // [hidden, q_size]
  const float* query_bias = nullptr;       // f32 [q_size], Qwen2 only
  const float* key_bias = nullptr;         // f32 [kv_size], Qwen2 only
  const float* value_bias = nullptr;       // f32 [kv_size], Qwen2 only
  const float* query_norm = nullptr;       // f32 [head_size], Qwen3 only
  const float* key_norm = nullptr;         // f32 [head_size], Qwen3 only
  const float* ffn_norm = nullptr;         // f32 [hidden]
  kernels::WeightMatrix gate;              // [ffn, hidden]
  kernels::WeightMatrix up;                // [ffn, hidden]
  kernels::WeightMatrix down;              // [hidden, ffn]
};

struct DecoderWeights {
  kernels::WeightMatrix token_embedding;  // [vocab, hidden]
  const float* output_norm = nullptr;     // f32 [hidden]
  kernels::WeightMatrix output;           // [vocab, hidden]; the embedding when tied
  std::vector<float> rope_frequency_factors;  // f32 [head_size/2], llama3 only
  std::vector<LayerWeights> layers;

  // `quantize` (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0): F32, F16 and BF16 matrices (and FP8 ones,
  // after their BF16 dequantization) are quantized at load, byte for byte as the gguf package
  // would (reference::quantize_weights); others stay as stored.
  static Result<DecoderWeights> load(const GgufFile& file, const ModelConfig& config,
                                     std::optional<DType> quantize = std::nullopt);
  // From a Hugging Face folder's safetensors (F32/F16/BF16, block-scaled FP8): the same matrices
  // as the GGUF file llama.cpp's converter writes from it (the llama layout's Q/K rows
  // interleaved per head).
  static Result<DecoderWeights> load(const HfCheckpoint& checkpoint, const ModelConfig& config,
                                     std::optional<DType> quantize = std::nullopt);
  // Tells every matrix how far ahead the decode kernels should prefetch it, from the bytes a
  // decode step streams (kernels::decode_prefetch_bytes: near when they come from memory).
  void set_decode_prefetch();

  // Vectors stored in another type than f32 (rare) are converted once and kept here.
  std::vector<std::unique_ptr<std::vector<float>>> converted_vectors;
  // Matrices rearranged at load (Hugging Face Q/K rows for the llama layout), before copying.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> converted_bytes;
  // The matrices' working copies, repacked for the SIMD kernels where they have a layout
  // (WeightMatrix::packed) or as stored (WeightMatrix::data).
  std::unique_ptr<HugePageArena> arena = std::make_unique<HugePageArena>();
};

}  // namespace tachyon
