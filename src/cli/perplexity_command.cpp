// `tachyon perplexity`: how well the model predicts a text. The text is cut into windows of
// --ctx tokens (stride --ctx, each from an empty cache); in each window the first half is
// context only and every later token is scored by -log p(token | the window before it), as
// llama.cpp's perplexity tool does. Perplexity = exp(mean score).
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
  bool json = false;
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float* logits, int vocab, int target) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

Status run_perplexity(const PerplexityOptions& options) {
  std::ifstream in(options.file, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open {}", options.file));
  std::stringstream buffer;
  buffer << in.rdbuf();
  ModelOptions model_options = options.model;
  model_options.context_size = options.window;
  TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(model_options));

  std::vector<TokenId> tokens = session.tokenizer->encode(buffer.str(), {.parse_special = false});
  if (options.max_tokens > 0 && static_cast<int>(tokens.size()) > options.max_tokens) {
    tokens.resize(options.max_tokens);
  }
  const int window = options.window;
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
    std::span<const TokenId> chunk(tokens.data() + static_cast<size_t>(w) * window, window);
    // Logits of the scored positions only, computed in batches of --batch-size:
    // window_logits row i - first_scored holds position i's prediction.
    std::vector<float> window_logits(static_cast<size_t>(window - first_scored) * vocab);
    for (int begin = 0; begin < window; begin += options.model.batch_size) {
      const int count = std::min(options.model.batch_size, window - begin);
      const int wanted = std::clamp(begin + count - first_scored, 0, count);
      TACHYON_RETURN_IF_ERROR(model.forward(chunk.subspan(begin, count), begin, cache,
                                            *session.pool, wanted, logits));
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
  command->add_option("-f,--file", options->file, "Text file")->required();
  command->add_option("--ctx", options->window, "Window size in tokens (512)")
      ->check(CLI::Range(2, 1 << 20));
  command->add_option("--max-tokens", options->max_tokens, "Use only the first N tokens")
      ->check(CLI::Range(0, 1 << 30));
  command->add_flag("--json", options->json, "Print {\"perplexity\": ..., \"tokens\": ...}");
  command->callback([options] {
    Status status = run_perplexity(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli
