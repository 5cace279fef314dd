// `tachyon perplexity`: how well the model predicts a text. By default the text is cut into
// windows of --ctx tokens (stride --ctx, each from an empty cache); in each window the first
// half is context only and every later token is scored by -log p(token | the window before
// it), as llama.cpp's perplexity tool does. Perplexity = exp(mean score).
//
// Two more ways score the same tokens (every one after the first --ctx), each with between
// ctx - stride + 1 and ctx tokens of context, so that they compare:
//   --stride N   windows of --ctx tokens moving by N, each recomputed from an empty cache, their
//                last N predictions scored (the "recompute the window" reference); with
//                --sink-tokens S each window is the text's first S tokens, then the last
//                ctx - S before the chunk's end: the tokens a stream's cache holds, recomputed
//                (Gemma, lost without its BOS first, needs this reference);
//   --stream     one cache of --ctx tokens streamed through the text (StreamingLLM): when it is
//                full, N tokens after the first --sink-tokens are dropped, the rest moved down
//                and their keys turned back by N positions, and the next N tokens computed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "cli/model_session.h"

namespace tachyon::cli {
namespace {

struct PerplexityOptions {
  ModelOptions model;
  std::string file;
  int window = 512;
  int max_tokens = 0;  // 0: the whole file
  int stride = 0;      // --stride: sliding windows (0: halves of whole windows)
  bool stream = false;  // --stream: one cache streamed through (StreamingLLM)
  // The text's first tokens kept in every window (-1: 4 with --stream, none with --stride).
  int sink_tokens = -1;
  bool json = false;
};

// Running sum of -log p over the scored tokens.
struct Score {
  double total = 0;
  int64_t count = 0;
  double perplexity() const { return std::exp(total / static_cast<double>(count)); }
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float* logits, int vocab, int target) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

// Runs `tokens` at positions `start`.. in batches of `batch` and returns the logits of tokens
// [first_wanted, size): f32 [size - first_wanted, vocab].
Status run_tokens(DecoderModel& model, ThreadPool& pool, KvCache& cache,
                  std::span<const TokenId> tokens, int start, int first_wanted, int batch,
                  std::vector<float>& out) {
  const int size = static_cast<int>(tokens.size());
  const size_t vocab = model.config().vocab_size;
  out.resize(static_cast<size_t>(size - first_wanted) * vocab);
  std::vector<float> logits;
  for (int begin = 0; begin < size; begin += batch) {
    const int count = std::min(batch, size - begin);
    const int wanted = std::clamp(begin + count - first_wanted, 0, count);
    TACHYON_RETURN_IF_ERROR(
        model.forward(tokens.subspan(begin, count), start + begin, cache, pool, wanted, logits));
    const int first = begin + count - wanted;
    std::copy(logits.begin(), logits.end(),
              out.begin() + static_cast<ptrdiff_t>(first - first_wanted) * vocab);
  }
  return Status();
}

// --stride: the predictions of tokens [window, window + k·stride) chunk by chunk, each from
// the `window` tokens before the chunk's end recomputed in an empty cache.
Status score_sliding(const PerplexityOptions& options, ModelSession& session,
                     std::span<const TokenId> tokens, Score& score) {
  DecoderModel& model = *session.model;
  const int vocab = model.config().vocab_size;
  const int window = options.window, stride = options.stride, sink = options.sink_tokens;
  KvCache cache = model.make_cache(window, session.cache_type);
  std::vector<float> logits;
  std::vector<TokenId> context(tokens.begin(), tokens.begin() + sink);
  const int chunks = (static_cast<int>(tokens.size()) - window) / stride;
  for (int k = 0; k < chunks; ++k) {
    const int end = window + (k + 1) * stride;  // tokens [end - stride, end) are scored
    context.resize(sink);
    context.insert(context.end(), tokens.begin() + (end - 1 - (window - sink)),
                   tokens.begin() + (end - 1));
    TACHYON_RETURN_IF_ERROR(run_tokens(model, *session.pool, cache, context, 0, window - stride,
                                       options.model.batch_size, logits));
    for (int i = 0; i < stride; ++i) {
      score.total += negative_log_likelihood(logits.data() + static_cast<size_t>(i) * vocab,
                                             vocab, tokens[end - stride + i]);
      ++score.count;
    }
    if (!options.json) {
      std::fprintf(stderr, "\rchunk %d/%d: perplexity so far %.4f", k + 1, chunks,
                   score.perplexity());
    }
  }
  return Status();
}

// --stream: the same predictions from one cache of `window` tokens streamed through the text.
Status score_streaming(const PerplexityOptions& options, ModelSession& session,
                       std::span<const TokenId> tokens, Score& score) {
  DecoderModel& model = *session.model;
  const int vocab = model.config().vocab_size;
  const int window = options.window, stride = options.stride, sink = options.sink_tokens;
  KvCache cache = model.make_cache(window, session.cache_type);
  std::vector<float> logits;
  TACHYON_RETURN_IF_ERROR(run_tokens(model, *session.pool, cache, tokens.first(window), 0,
                                     window - 1, options.model.batch_size, logits));
  std::vector<float> previous(logits.begin(), logits.begin() + vocab);  // predicts the next
  int length = window;
  const int chunks = (static_cast<int>(tokens.size()) - window) / stride;
  for (int k = 0; k < chunks; ++k) {
    const int begin = window + k * stride;
    cache.drop_positions(sink, stride, length, [&](float* keys, int n, int layer) {
      model.shift_keys(keys, n, stride, layer);
    });
    length -= stride;
    std::span<const TokenId> chunk = tokens.subspan(begin, stride);
    TACHYON_RETURN_IF_ERROR(run_tokens(model, *session.pool, cache, chunk, length, 0,
                                       options.model.batch_size, logits));
    length += stride;
    for (int i = 0; i < stride; ++i) {
      const float* row = i == 0 ? previous.data() : logits.data() + static_cast<size_t>(i - 1) * vocab;
      score.total += negative_log_likelihood(row, vocab, chunk[i]);
      ++score.count;
    }
    std::copy(logits.end() - vocab, logits.end(), previous.begin());
    if (!options.json) {
      std::fprintf(stderr, "\rchunk %d/%d: perplexity so far %.4f", k + 1, chunks,
                   score.perplexity());
    }
  }
  return Status();
}

Status run_perplexity(const PerplexityOptions& options) {
  std::ifstream in(options.file, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open {}", options.file));
  std::stringstream buffer;
  buffer << in.rdbuf();
  ModelOptions model_options = options.model;
  model_options.context_size = options.window;
  if (options.stream && model_options.distributed()) {
    // It drops and shifts cached positions outside the forward passes every rank runs.
    return unsupported("--stream runs in one process (not with --tp or --pp yet)");
  }
  TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(model_options));
  if (session.follows()) return session.follow();

  // A model whose vocabulary asks for BOS (Gemma, Llama) gets it first, and each window of the
  // default mode starts with it, as llama.cpp's perplexity tool does (Gemma without it is lost).
  const Vocabulary& vocabulary = session.tokenizer->vocabulary();
  const bool add_bos = vocabulary.add_bos && vocabulary.bos_id.has_value();
  const TokenId bos = add_bos ? *vocabulary.bos_id : 0;
  std::vector<TokenId> tokens =
      session.tokenizer->encode(buffer.str(), {.parse_special = false, .add_special = add_bos});
  if (options.max_tokens > 0 && static_cast<int>(tokens.size()) > options.max_tokens) {
    tokens.resize(options.max_tokens);
  }
  const int window = options.window;
  if (options.sink_tokens >= 0 && options.stride == 0 && !options.stream) {
    return invalid_argument("--sink-tokens goes with --stream or --stride");
  }
  if (options.stride > 0 || options.stream) {
    PerplexityOptions sliding = options;
    if (sliding.stride == 0) sliding.stride = std::max(1, window / 8);
    if (sliding.sink_tokens < 0) sliding.sink_tokens = options.stream ? 4 : 0;
    if (sliding.stride >= window || sliding.sink_tokens + sliding.stride > window) {
      return invalid_argument(
          fmt::format("--stride {} and --sink-tokens {} must leave room in --ctx {}",
                      sliding.stride, sliding.sink_tokens, window));
    }
    if (static_cast<int>(tokens.size()) < window + sliding.stride) {
      return invalid_argument(fmt::format("{} has {} tokens, fewer than --ctx {} + --stride {}",
                                          options.file, tokens.size(), window, sliding.stride));
    }
    Score score;
    TACHYON_RETURN_IF_ERROR(options.stream ? score_streaming(sliding, session, tokens, score)
                                           : score_sliding(sliding, session, tokens, score));
    const char* mode = options.stream ? "stream" : "stride";
    if (options.json) {
      boost::json::object result{{"perplexity", score.perplexity()}, {"tokens", score.count},
                                 {"mode", mode},                     {"window", window},
                                 {"stride", sliding.stride}};
      result["sink_tokens"] = sliding.sink_tokens;
      std::printf("%s\n", boost::json::serialize(result).c_str());
    } else {
      std::fprintf(stderr, "\n");
      std::printf("perplexity %.4f over %lld scored tokens (%s, window %d, stride %d)\n",
                  score.perplexity(), static_cast<long long>(score.count), mode, window,
                  sliding.stride);
    }
    return Status();
  }
  const int num_windows = static_cast<int>(tokens.size()) / window;
  if (num_windows == 0) {
    return invalid_argument(fmt::format("{} has {} tokens, fewer than one window of {}",
                                        options.file, tokens.size(), window));
  }
  DecoderModel& model = *session.model;
  const int vocab = model.config().vocab_size;
  KvCache cache = model.make_cache(window, session.cache_type);
  std::vector<float> logits;
  double total = 0;
  int64_t scored = 0;
  const int first_scored = window / 2;  // logits at positions first_scored..window-2
  for (int w = 0; w < num_windows; ++w) {
    std::vector<TokenId> chunk(tokens.begin() + static_cast<ptrdiff_t>(w) * window,
                               tokens.begin() + static_cast<ptrdiff_t>(w + 1) * window);
    if (add_bos) chunk[0] = bos;
    // Logits of the scored positions only, computed in batches of --batch-size:
    // window_logits row i - first_scored holds position i's prediction.
    std::vector<float> window_logits(static_cast<size_t>(window - first_scored) * vocab);
    for (int begin = 0; begin < window; begin += options.model.batch_size) {
      const int count = std::min(options.model.batch_size, window - begin);
      const int wanted = std::clamp(begin + count - first_scored, 0, count);
      TACHYON_RETURN_IF_ERROR(model.forward(std::span<const TokenId>(chunk).subspan(begin, count),
                                            begin, cache, *session.pool, wanted, logits));
      const int first_wanted = begin + count - wanted;
      std::copy(logits.begin(), logits.end(),
                window_logits.begin() + static_cast<size_t>(first_wanted - first_scored) * vocab);
    }
    for (int i = first_scored; i < window - 1; ++i) {
      total += negative_log_likelihood(
          window_logits.data() + static_cast<size_t>(i - first_scored) * vocab, vocab, chunk[i + 1]);
      ++scored;
    }
    if (!options.json) {
      std::fprintf(stderr, "\rwindow %d/%d: perplexity so far %.4f", w + 1, num_windows,
                   std::exp(total / scored));
    }
  }
  const double perplexity = std::exp(total / scored);
  if (options.json) {
    boost::json::object result{{"perplexity", perplexity},
                               {"tokens", scored},
                               {"windows", num_windows},
                               {"window", window}};
    std::printf("%s\n", boost::json::serialize(result).c_str());
  } else {
    std::fprintf(stderr, "\n");
    std::printf("perplexity %.4f over %lld scored tokens (%d windows of %d)\n", perplexity,
                static_cast<long long>(scored), num_windows, window);
  }
  return Status();
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto options = std::make_shared<PerplexityOptions>();
  CLI::App* command = app.add_subcommand("perplexity", "Measure perplexity on a text file");
  add_model_option(*command, options->model.model_path);  // from cli/model_path.h
  command->add_option("-t,--threads", options->model.threads, "Threads (default: all)");
  command->add_option("-b,--batch-size", options->model.batch_size, "Tokens per forward pass (512)")
      ->check(CLI::Range(1, 1 << 16));
  add_cache_type_option(*command, options->model.cache_type);
  add_numerics_option(*command, options->model);
  add_mla_attention_option(*command, options->model);
  add_parallel_options(*command, options->model);
  command->add_option("-f,--file", options->file, "Text file")->required();
  command->add_option("--ctx", options->window, "Window size in tokens (512)")
      ->check(CLI::Range(2, 1 << 20));
  command->add_option("--max-tokens", options->max_tokens, "Use only the first N tokens")
      ->check(CLI::Range(0, 1 << 30));
  command
      ->add_option("--stride", options->stride,
                   "Windows of --ctx moving by N tokens, each recomputed, the last N "
                   "predictions scored (default with --stream: ctx/8)")
      ->check(CLI::Range(0, 1 << 20));
  command->add_flag("--stream", options->stream,
                    "Stream one cache of --ctx tokens through the text (StreamingLLM): keep "
                    "the first --sink-tokens, drop --stride tokens after them when full");
  command
      ->add_option("--sink-tokens", options->sink_tokens,
                   "The text's first tokens kept in every window: with --stream (default 4; "
                   "0: a plain sliding window) or --stride (default 0; the stream's tokens "
                   "recomputed)")
      ->check(CLI::Range(0, 1 << 20));
  command->add_flag("--json", options->json, "Print {\"perplexity\": ..., \"tokens\": ...}");
  command->callback([options] {
    Status status = run_perplexity(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli
