// What a 4-bit KV cache would cost in perplexity, before building one (issue 26: "q4 with a
// Hadamard rotation of keys if it measures well"). Each variant runs the model token by token
// over windows of the corpus on an f32 cache and, right after each token's keys and values are
// stored, replaces them with their quantized round trip, so every later token attends to what
// that cache type would hold (the token itself sees its own exact key, the only difference).
//
//   f32            the reference
//   q8             int8 per 32 values with an f16 scale (llama.cpp's q8_0; tachyon's q8)
//   q4             4 bits per 32 values with an f16 scale (llama.cpp's q4_0)
//   q4-hadamard-k  q4, keys rotated by a normalized Walsh-Hadamard transform per head first
//                  (queries would be rotated alike: dot products are unchanged)
//   q4-hadamard    q4, keys and values rotated (values rotated back after the sum)
//
// Windows as `tachyon perplexity`: --ctx tokens each, BOS first when the vocabulary asks, the
// second half scored. Prints one JSON object per variant.
//
//   build/bench/kv_quant_study -m MODEL.gguf -f corpus.txt [--ctx 2048] [--windows 4] [-t N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/half.h"
#include "core/thread_pool.h"
#include "model_files/gguf_file.h"
#include "models/decoder_model.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

enum class Variant { kF32, kQ8, kQ4, kQ4HadamardKeys, kQ4Hadamard };

struct VariantInfo {
  Variant variant;
  const char* name;
};

constexpr VariantInfo kVariants[] = {{Variant::kF32, "f32"},
                                     {Variant::kQ8, "q8"},
                                     {Variant::kQ4, "q4"},
                                     {Variant::kQ4HadamardKeys, "q4-hadamard-k"},
                                     {Variant::kQ4Hadamard, "q4-hadamard"}};

// x in place -> H x / sqrt(n) (orthonormal and its own inverse); n a power of two.
void hadamard(float* x, int n) {
  for (int half = 1; half < n; half *= 2) {
    for (int i = 0; i < n; i += 2 * half) {
      for (int j = i; j < i + half; ++j) {
        const float a = x[j], b = x[j + half];
        x[j] = a + b;
        x[j + half] = a - b;
      }
    }
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

// The round trip of 32 values through q8_0 (scale absmax / 127) or q4_0 (scale = the value of
// largest magnitude / -8, codes 0..15 around 8), scales stored as f16, as llama.cpp does.
void quantize_group(float* x, bool four_bits) {
  constexpr int kGroup = 32;
  float extreme = 0;
  for (int i = 0; i < kGroup; ++i) {
    if (std::abs(x[i]) > std::abs(extreme)) extreme = x[i];
  }
  if (four_bits) {
    const float d = round_to_f16(extreme / -8.0f);
    const float inverse = d != 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < kGroup; ++i) {
      const int q = std::clamp(static_cast<int>(x[i] * inverse + 8.5f), 0, 15);
      x[i] = static_cast<float>(q - 8) * d;
    }
  } else {
    const float d = round_to_f16(std::abs(extreme) / 127.0f);
    const float inverse = d != 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < kGroup; ++i) x[i] = std::round(x[i] * inverse) * d;
  }
}

// One head's row of head_size values as `variant` would store it (rotated and back when asked).
void round_trip(float* row, int head_size, Variant variant, bool is_key) {
  if (variant == Variant::kF32) return;
  const bool rotate = variant == Variant::kQ4Hadamard ||
                      (variant == Variant::kQ4HadamardKeys && is_key);
  if (rotate) hadamard(row, head_size);
  for (int g = 0; g < head_size; g += 32) quantize_group(row + g, variant != Variant::kQ8);
  if (rotate) hadamard(row, head_size);
}

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float* logits, int vocab, int target) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

double window_perplexity_sum(DecoderModel& model, ThreadPool& pool,
                             std::span<const TokenId> window, Variant variant, int64_t& scored) {
  const ModelConfig& config = model.config();
  const int ctx = static_cast<int>(window.size()), head_size = config.head_size;
  const int kv = config.kv_size(), vocab = config.vocab_size;
  KvCache cache = model.make_cache(ctx, DType::kF32);
  std::vector<float> logits, keys(kv), values(kv);
  std::vector<float> by_dimension(head_size), head_values(head_size);
  double total = 0;
  for (int p = 0; p < ctx; ++p) {
    if (!model.forward(window.subspan(p, 1), p, cache, pool, 1, logits).ok()) std::abort();
    if (p >= ctx / 2 && p + 1 < ctx) {
      total += negative_log_likelihood(logits.data(), vocab, window[p + 1]);
      ++scored;
    }
    if (variant == Variant::kF32) continue;
    for (int layer = 0; layer < config.num_layers; ++layer) {
      for (int head = 0; head < config.num_kv_heads; ++head) {
        cache.load_span(layer, head, head_size, p, 1, by_dimension.data(), 1,
                        head_values.data());
        std::copy(by_dimension.begin(), by_dimension.end(), keys.begin() + head * head_size);
        std::copy(head_values.begin(), head_values.end(), values.begin() + head * head_size);
        round_trip(keys.data() + head * head_size, head_size, variant, true);
        round_trip(values.data() + head * head_size, head_size, variant, false);
      }
      cache.store(layer, p, 1, keys.data(), values.data());
    }
  }
  return total;
}

int run(int argc, char** argv) {
  CLI::App app{"Perplexity with simulated KV cache quantization"};
  std::string model_path, corpus_path;
  int ctx = 2048, windows = 4, threads = 0;
  app.add_option("-m,--model", model_path)->required();
  app.add_option("-f,--file", corpus_path)->required();
  app.add_option("--ctx", ctx);
  app.add_option("--windows", windows);
  app.add_option("-t,--threads", threads);
  CLI11_PARSE(app, argc, argv);

  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(model_path);
  if (!file.ok()) return std::fprintf(stderr, "%s\n", file.status().message().c_str()), 1;
  Result<std::unique_ptr<DecoderModel>> model = DecoderModel::load(**file);
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(**file);
  if (!model.ok() || !tokenizer.ok()) return std::fprintf(stderr, "cannot load the model\n"), 1;
  const ModelConfig& config = (*model)->config();
  if (config.mla.enabled() || (config.head_size & (config.head_size - 1)) != 0 ||
      config.head_size % 32 != 0) {
    return std::fprintf(stderr, "needs heads of a power of two >= 32 values, not MLA\n"), 1;
  }
  std::ifstream in(corpus_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const Vocabulary& vocabulary = (*tokenizer)->vocabulary();
  const bool add_bos = vocabulary.add_bos && vocabulary.bos_id.has_value();
  const std::vector<TokenId> tokens =
      (*tokenizer)->encode(text.str(), {.parse_special = false, .add_special = add_bos});
  if (static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(ctx) * windows) {
    return std::fprintf(stderr, "the corpus has fewer than %d windows\n", windows), 1;
  }
  ThreadPool pool(threads);
  double reference = 0;
  for (const VariantInfo& info : kVariants) {
    double total = 0;
    int64_t scored = 0;
    for (int w = 0; w < windows; ++w) {
      std::vector<TokenId> window(tokens.begin() + static_cast<ptrdiff_t>(w) * ctx,
                                  tokens.begin() + static_cast<ptrdiff_t>(w + 1) * ctx);
      if (add_bos) window[0] = *vocabulary.bos_id;
      total += window_perplexity_sum(**model, pool, window, info.variant, scored);
    }
    const double perplexity = std::exp(total / static_cast<double>(scored));
    if (info.variant == Variant::kF32) reference = perplexity;
    std::printf("%s\n", fmt::format("{{\"cache\": \"{}\", \"perplexity\": {:.4f}, \"vs_f32\": "
                                    "\"{:+.3f}%\", \"tokens\": {}}}",
                                    info.name, perplexity, 100 * (perplexity / reference - 1),
                                    scored)
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) { return tachyon::run(argc, argv); }
