// `tachyon bench`: prompt processing (ppN) and generation (tgN) speed, measured like
// llama-bench: ppN computes N prompt tokens from an empty cache in batches, tgN generates N
// tokens one at a time from an empty cache. Mean ± stddev over repetitions, after a warm-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli/commands.h"
#include "cli/model_session.h"
#include "cli/speculation_flags.h"
#include "core/cpu_features.h"
#include "core/process_memory.h"
#include "kernels/cpu/bandwidth_probe.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "server/expert_report.h"

namespace tachyon::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  int prompt_tokens = 512;
  int generated_tokens = 128;
  // Context already in the cache when the pp and tg tests start (llama-bench's -d): their
  // tokens attend to it too.
  int depth = 0;
  int repetitions = 5;
  // Batched decoding through the serving engine: `parallel` sequences, each with a prompt of
  // `parallel_prompt` random tokens, generating `parallel_gen` tokens (0 = skip).
  int parallel = 0;
  int parallel_prompt = 128;
  int parallel_gen = 64;
  bool roofline = true;  // measure memory bandwidth and print the decode roofline
  bool json = false;
  // --speculative: the copy tests (and the batched test) speculate.
  SpeculationFlags speculation;
};

struct Measurement {
  std::string test;
  double mean = 0;
  double stddev = 0;
  std::vector<double> samples;  // tokens/s of each repetition
  boost::json::object speculative;  // copy tests with speculation: drafts and acceptance
};

Measurement summarize(std::string test, const std::vector<double>& rates) {
  Measurement m;
  m.test = std::move(test);
  m.samples = rates;
  m.mean = std::accumulate(rates.begin(), rates.end(), 0.0) / rates.size();
  double sum_squares = 0;
  for (double rate : rates) sum_squares += (rate - m.mean) * (rate - m.mean);
  m.stddev = rates.size() > 1 ? std::sqrt(sum_squares / (rates.size() - 1)) : 0.0;
  return m;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Bytes one decoded token reads: every weight matrix once (the output matrix too, even when it
// is the tied embedding; of a MoE layer's routed experts the ones it chooses; the embedding
// lookup itself reads one row), the norms, and the cached keys and values (MLA: latents) of
// `context` positions (of at most the window in sliding-window layers).
double decode_bytes_per_token(const DecoderModel& model, double context, DType cache_type) {
  const ModelConfig& config = model.config();
  double total = model.weights().decode_weight_bytes() +
                 static_cast<double>(model.weights().token_embedding.row_bytes());
  total += static_cast<double>(config.hidden_size) * sizeof(float) * (2 * config.num_layers + 1);
  // Sliding-window layers read only their window.
  const double layer_bytes = static_cast<double>(
      PagedKvCache::block_bytes(1, config.kv_size(), 1, cache_type, config.kv_values_are_keys()));
  for (int layer = 0; layer < config.num_layers; ++layer) {
    total += layer_bytes * (config.layer_is_local(layer)
                                ? std::min(context, static_cast<double>(config.sliding_window))
                                : context);
  }
  return total;
}

Status run_bench(BenchOptions& options) {
  TACHYON_RETURN_IF_ERROR(options.speculation.finish());
  const bool speculate = options.speculation.options.enabled();
  TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(options.model));
  if (session.follows()) return session.follow();
  TACHYON_ASSIGN_OR_RETURN(DraftSession draft, open_draft_model(options.speculation));
  DecoderModel& model = *session.model;
  const int needed =
      options.depth + std::max({options.prompt_tokens, options.generated_tokens, 1});
  if (needed > model.config().context_length) {
    return invalid_argument(fmt::format("the test needs {} positions but the model's context is {}",
                                        needed, model.config().context_length));
  }
  KvCache cache = model.make_cache(needed, session.cache_type);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> random_token(0, model.config().vocab_size - 1);
  std::vector<float> logits;

  // `count` random tokens from position `first` on, a batch at a time.
  auto run_prompt = [&](int first, int count) -> Status {
    std::vector<TokenIndex> tokens(count);
    for (TokenIndex& token : tokens) token = random_token(rng);
    for (int begin = 0; begin < count; begin += options.model.batch_size) {
      const int n = std::min(options.model.batch_size, count - begin);
      TACHYON_RETURN_IF_ERROR(model.forward(std::span<const TokenIndex>(tokens).subspan(begin, n),
                                            first + begin, cache, *session.pool, 1, logits));
    }
    return Status();
  };
  // The context every test starts from, computed once (the tests only write past it).
  TACHYON_RETURN_IF_ERROR(run_prompt(0, options.depth));
  auto time_prompt = [&]() -> Result<double> {
    const auto start = std::chrono::steady_clock::now();
    TACHYON_RETURN_IF_ERROR(run_prompt(options.depth, options.prompt_tokens));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto time_generation = [&]() -> Result<double> {
    TokenIndex token = random_token(rng);
    const auto start = std::chrono::steady_clock::now();
    for (int position = options.depth; position < options.depth + options.generated_tokens;
         ++position) {
      TACHYON_RETURN_IF_ERROR(model.forward(std::span<const TokenIndex>(&token, 1), position, cache,
                                            *session.pool, 1, logits));
      token = static_cast<TokenIndex>(
          kernels::argmax(logits.data(), static_cast<int64_t>(logits.size())));  // greedy
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  // `parallel` sequences served together by the engine (continuous batching over the paged KV
  // cache). Returns {generation tokens/s once every sequence has its first token (as
  // llama-batched-bench's S_TG: the prompts are done), generated tokens/s from submission to
  // the last token (prompt processing included)}.
  auto time_parallel = [&](Engine& engine) -> Result<std::pair<double, double>> {
    using Clock = std::chrono::steady_clock;
    struct Sequence {
      std::shared_ptr<RequestStream> stream;
      std::vector<std::pair<Clock::time_point, int>> arrivals;  // (when, tokens)
      bool finished = false;
    };
    std::vector<Sequence> sequences;
    const auto start = Clock::now();
    for (int i = 0; i < options.parallel; ++i) {
      EngineRequest request;
      for (int t = 0; t < options.parallel_prompt; ++t) request.prompt.push_back(random_token(rng));
      request.sampling.temperature = 0;
      request.sampling.ignore_eos = true;
      request.sampling.max_tokens = options.parallel_gen;
      TACHYON_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream,
                               engine.submit(std::move(request)));
      sequences.push_back({std::move(stream), {}, false});
    }
    // Timestamps as the outputs come (polled every millisecond, well below a step).
    for (int unfinished = options.parallel; unfinished > 0;) {
      bool any = false;
      for (Sequence& sequence : sequences) {
        while (std::optional<EngineOutput> output = sequence.stream->try_pop()) {
          any = true;
          if (!output->status.ok()) return output->status;
          if (!output->tokens.empty()) {
            sequence.arrivals.emplace_back(Clock::now(), static_cast<int>(output->tokens.size()));
          }
          if (output->finished) {
            sequence.finished = true;
            --unfinished;
          }
        }
      }
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto end = Clock::now();
    Clock::time_point all_started = start;
    int total = 0;
    for (const Sequence& sequence : sequences) {
      if (!sequence.arrivals.empty()) {
        all_started = std::max(all_started, sequence.arrivals[0].first);
      }
      for (const auto& [when, count] : sequence.arrivals) total += count;
    }
    int after = 0;
    for (const Sequence& sequence : sequences) {
      for (const auto& [when, count] : sequence.arrivals) after += when > all_started ? count : 0;
    }
    const double decode_seconds = std::chrono::duration<double>(end - all_started).count();
    const double all_seconds = std::chrono::duration<double>(end - start).count();
    return std::make_pair(decode_seconds > 0 ? after / decode_seconds : 0.0, total / all_seconds);
  };

  std::vector<Measurement> results;
  // Tests run at a depth are named as llama-bench names them ("tg128 @ d8192").
  const std::string depth_suffix = options.depth > 0 ? fmt::format(" @ d{}", options.depth) : "";
  if (options.prompt_tokens > 0) {
    TACHYON_RETURN_IF_ERROR(time_prompt().status());  // warm-up: page in weights, grow buffers
    std::vector<double> rates;
    for (int r = 0; r < options.repetitions; ++r) {
      TACHYON_ASSIGN_OR_RETURN(double seconds, time_prompt());
      rates.push_back(options.prompt_tokens / seconds);
    }
    results.push_back(summarize(fmt::format("pp{}{}", options.prompt_tokens, depth_suffix), rates));
  }
  // The read bandwidth on offer changes from minute to minute on a shared machine, so the
  // roofline is probed right before and after each decode repetition and each repetition is
  // compared with the mean of its two probes.
  std::optional<kernels::BandwidthProbe> probe;
  if (options.roofline) probe.emplace(*session.pool);
  std::vector<double> generation_rates;
  std::vector<double> generation_bandwidths;  // bytes/s around each repetition
  if (options.generated_tokens > 0) {
    TACHYON_RETURN_IF_ERROR(time_generation().status());
    for (int r = 0; r < options.repetitions; ++r) {
      const double before = probe ? probe->measure(2).bytes_per_second : 0.0;
      TACHYON_ASSIGN_OR_RETURN(double seconds, time_generation());
      generation_rates.push_back(options.generated_tokens / seconds);
      if (probe) {
        generation_bandwidths.push_back((before + probe->measure(2).bytes_per_second) / 2);
      }
    }
    results.push_back(
        summarize(fmt::format("tg{}{}", options.generated_tokens, depth_suffix), generation_rates));
  }

  // Speculation: copyN generates N greedy tokens through the Generator after a prompt of 64
  // random tokens said three times (a copy task: what comes next is in the prompt), and
  // copyN_MODE the same with --speculative MODE; the tokens are the same, only the speed
  // differs.
  if (speculate && options.generated_tokens > 0) {
    std::vector<TokenId> prompt;
    for (int i = 0; i < 64; ++i) prompt.push_back(random_token(rng));
    for (int copy = 0; copy < 2; ++copy) {
      for (int i = 0; i < 64; ++i) prompt.push_back(prompt[i]);
    }
    SamplingParams params;
    params.temperature = 0;
    params.ignore_eos = true;
    params.max_tokens = options.generated_tokens;
    std::unique_ptr<DraftModelRunner> draft_runner;
    if (draft.model) {
      TACHYON_ASSIGN_OR_RETURN(draft_runner, make_draft_runner(draft, session));
    }
    for (const bool on : {false, true}) {
      const int context = static_cast<int>(prompt.size()) + options.generated_tokens + 1;
      Generator generator(model, *session.tokenizer, *session.pool, context,
                          options.model.batch_size, session.cache_type);
      SpeculativeOptions speculation = options.speculation.options;
      if (!on) speculation.mode = SpeculativeMode::kOff;
      TACHYON_RETURN_IF_ERROR(generator.set_speculation(speculation, draft_runner.get()));
      std::vector<double> rates;
      int64_t drafts = 0, draft_tokens = 0, accepted = 0;
      for (int r = 0; r <= options.repetitions; ++r) {  // the first is the warm-up
        generator.forget_cache();
        TACHYON_ASSIGN_OR_RETURN(GenerationOutput output,
                                 generator.generate(prompt, params, [](std::string_view) {}));
        if (r == 0) continue;
        rates.push_back((output.tokens.size() - 1) / output.generation_seconds);
        drafts += output.drafts;
        draft_tokens += output.draft_tokens;
        accepted += output.accepted_draft_tokens;
      }
      const std::string mode = speculative_mode_name(options.speculation.options.mode);
      Measurement m = summarize(
          on ? fmt::format("copy{}_{}", options.generated_tokens, mode)
             : fmt::format("copy{}", options.generated_tokens),
          rates);
      if (on) {
        m.speculative = speculation_json(options.speculation.options.mode, drafts, draft_tokens,
                                         accepted);
      }
      results.push_back(std::move(m));
    }
  }

  if (options.parallel > 0) {
    EngineOptions engine_options;
    engine_options.speculative = options.speculation.options;
    engine_options.kv_cache_type = session.cache_type;
    // Enough blocks for every sequence, and no prefix reuse between repetitions.
    engine_options.kv_cache_bytes = static_cast<int64_t>(
        PagedKvCache::block_bytes(model.config().num_layers, model.config().kv_size(),
                                  engine_options.block_size, session.cache_type,
                                  model.config().kv_values_are_keys()) *
        (options.parallel * ((options.parallel_prompt + options.parallel_gen) / 16 + 2)));
    engine_options.enable_prefix_cache = false;
    engine_options.max_running_requests =
        std::max(engine_options.max_running_requests, options.parallel);
    TACHYON_ASSIGN_OR_RETURN(
        std::unique_ptr<Engine> engine,
        Engine::create(model, *session.tokenizer, *session.pool, engine_options, draft.ref()));
    TACHYON_RETURN_IF_ERROR(time_parallel(*engine).status());
    std::vector<double> decode_rates;
    std::vector<double> end_to_end_rates;
    for (int r = 0; r < options.repetitions; ++r) {
      TACHYON_ASSIGN_OR_RETURN(auto rates, time_parallel(*engine));
      decode_rates.push_back(rates.first);
      end_to_end_rates.push_back(rates.second);
    }
    results.push_back(summarize(fmt::format("batched{}", options.parallel), decode_rates));
    results.push_back(summarize(fmt::format("batched{}_e2e", options.parallel), end_to_end_rates));
    if (speculate) {
      const EngineMetrics metrics = engine->metrics();
      int64_t drafts = 0, draft_tokens = 0, accepted = 0;
      for (int s = 0; s < kNumDraftSources; ++s) {
        drafts += metrics.drafts_total[s];
        draft_tokens += metrics.draft_tokens_total[s];
        accepted += metrics.accepted_draft_tokens_total[s];
      }
      results[results.size() - 2].speculative =
          speculation_json(options.speculation.options.mode, drafts, draft_tokens, accepted);
    }
  }

  // The decode roofline: measured read bandwidth / bytes per decoded token.
  struct Roofline {
    double bytes_per_second = 0;  // median of the probes (best of 5 passes without a tg test)
    int probes = 0;               // probes taken around tg repetitions (0: one at the end)
    double bytes_per_token = 0;
    double tokens_per_second = 0;
    double fraction = 0;  // median over tg repetitions of speed / roofline at the time, or 0
  };
  std::optional<Roofline> roofline;
  if (probe) {
    Roofline r;
    const double mean_context =
        options.depth + std::max(0.0, (options.generated_tokens - 1) / 2.0);
    r.bytes_per_token = decode_bytes_per_token(model, mean_context, session.cache_type);
    if (generation_bandwidths.empty()) {
      r.bytes_per_second = probe->measure(5).bytes_per_second;
    } else {
      std::vector<double> fractions;
      for (size_t i = 0; i < generation_rates.size(); ++i) {
        fractions.push_back(generation_rates[i] * r.bytes_per_token / generation_bandwidths[i]);
      }
      r.bytes_per_second = median(generation_bandwidths);
      r.probes = static_cast<int>(generation_bandwidths.size()) * 2;
      r.fraction = median(fractions);
    }
    r.tokens_per_second = r.bytes_per_second / r.bytes_per_token;
    roofline = r;
  }

  if (options.json) {
    boost::json::array out;
    for (const Measurement& m : results) {
      boost::json::array samples(m.samples.begin(), m.samples.end());
      boost::json::object entry{{"test", m.test},
                                {"tokens_per_second", m.mean},
                                {"stddev", m.stddev},
                                {"samples", std::move(samples)}};
      if (!m.speculative.empty()) entry["speculative"] = m.speculative;
      out.push_back(std::move(entry));
    }
    if (model.config().moe.enabled()) {
      // Which experts the runs above chose (hot experts, imbalance) and the expert cache's
      // counters with --experts-mem.
      boost::json::object experts = server::expert_report_json(model, model.expert_load_report());
      experts["test"] = "experts";
      out.push_back(std::move(experts));
    }
    out.push_back({{"test", "memory"}, {"anonymous_resident_bytes", anonymous_resident_bytes()}});
    if (roofline) {
      out.push_back({{"test", "roofline"},
                     {"tokens_per_second", roofline->tokens_per_second},
                     {"read_bandwidth_gb_per_s", roofline->bytes_per_second / 1e9},
                     {"bytes_per_token", roofline->bytes_per_token},
                     {"tg_fraction_of_roofline", roofline->fraction}});
    }
    std::printf("%s\n", boost::json::serialize(out).c_str());
    return Status();
  }
  std::printf("model    %s\nthreads  %d, kernels %s (%s)\n", session.files.path.c_str(),
              session.pool->num_threads(),
              std::string(kernels::kernel_level_name(kernels::active_kernel_level())).c_str(),
              CpuFeatures::get().describe().c_str());
  // The level each family's code ran at in the measurements above.
  std::printf("families %s\n", kernels::describe_family_levels().c_str());
  std::printf("%-8s %18s\n", "test", "tokens/s");
  for (const Measurement& m : results) {
    std::printf("%-8s %10.2f ± %5.2f", m.test.c_str(), m.mean, m.stddev);
    if (!m.speculative.empty()) {
      std::printf("   (drafts: %.0f%% of %lld guessed tokens accepted, %.2f per draft)",
                  100 * m.speculative.at("acceptance_rate").as_double(),
                  static_cast<long long>(m.speculative.at("draft_tokens").as_int64()),
                  m.speculative.at("mean_accepted_length").as_double());
    }
    std::printf("\n");
  }
  if (roofline) {
    if (roofline->probes > 0) {
      std::printf(
          "memory   %.1f GB/s read with %d threads (median of %d probes, one before and "
          "one after each tg repetition)\n",
          roofline->bytes_per_second / 1e9, session.pool->num_threads(), roofline->probes);
    } else {
      std::printf("memory   %.1f GB/s read with %d threads (best of 5 passes)\n",
                  roofline->bytes_per_second / 1e9, session.pool->num_threads());
    }
    std::printf(
        "roofline %.1f MB read per decoded token (weights + KV cache at the tg test's mean "
        "context): at most %.1f tokens/s",
        roofline->bytes_per_token / 1e6, roofline->tokens_per_second);
    if (roofline->fraction > 0) {
      std::printf(
          "; tg%d reaches %.0f%% (median over repetitions, each against the bandwidth "
          "probed around it)",
          options.generated_tokens, 100.0 * roofline->fraction);
    }
    std::printf("\n");
  }
  if (model.config().moe.enabled()) {
    const boost::json::object experts = server::expert_report_json(model, model.expert_load_report());
    std::printf("experts  imbalance (most chosen / mean) %.2f at most, %.2f on average over %zu "
                "MoE layers (tachyon bench --json: every count)\n",
                experts.at("max_imbalance").to_number<double>(),
                experts.at("mean_imbalance").to_number<double>(),
                experts.at("layers").as_array().size());
    if (const ExpertCache* cache = model.expert_cache()) {
      const ExpertCache::Counters c = cache->counters();
      const double lookups = static_cast<double>(c.hits + c.misses);
      std::printf("cache    --experts-mem %.1f of %.1f MiB of experts: %.1f%% hits (%llu of %.0f), "
                  "%.1f MiB read from the file\n",
                  c.capacity_bytes / 1048576.0, c.expert_bytes / 1048576.0,
                  lookups > 0 ? 100.0 * c.hits / lookups : 0.0,
                  static_cast<unsigned long long>(c.hits), lookups, c.bytes_read / 1048576.0);
    }
  }
  std::printf("resident %.1f MiB of anonymous memory (RssAnon)\n",
              anonymous_resident_bytes() / 1048576.0);
  return Status();
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command = app.add_subcommand("bench", "Measure prompt and generation speed");
  add_model_options(*command, options->model);
  command->add_option("-p,--prompt-tokens", options->prompt_tokens, "ppN test size, 0 = skip (512)")
      ->check(CLI::Range(0, 1 << 20));
  command->add_option("-n,--gen-tokens", options->generated_tokens, "tgN test size, 0 = skip (128)")
      ->check(CLI::Range(0, 1 << 20));
  command
      ->add_option("-d,--depth", options->depth,
                   "Context already cached when the pp and tg tests start, as llama-bench's -d "
                   "(0); the tests are then named \"pp512 @ d8192\"")
      ->check(CLI::Range(0, 1 << 24));
  command->add_option("-r,--repetitions", options->repetitions, "Repetitions per test (5)")
      ->check(CLI::Range(1, 1000));
  command
      ->add_option("--parallel", options->parallel,
                   "Batched decoding test: this many sequences at once through the engine; "
                   "reports batchedN, aggregate generated tokens/s once all prompts are "
                   "done (as llama-batched-bench's S_TG), and batchedN_e2e, generated "
                   "tokens/s from submission to the end (0 = skip)")
      ->check(CLI::Range(0, 4096));
  command
      ->add_option("--parallel-prompt", options->parallel_prompt,
                   "Prompt tokens per sequence in the batched test (128)")
      ->check(CLI::Range(1, 1 << 20));
  command
      ->add_option("--parallel-gen", options->parallel_gen,
                   "Generated tokens per sequence in the batched test (64)")
      ->check(CLI::Range(1, 1 << 20));
  command->add_flag("!--no-roofline", options->roofline,
                    "Skip the memory-bandwidth probe and the decode roofline it gives");
  add_speculation_flags(*command, options->speculation);
  command->add_flag("--json", options->json,
                    "Print a JSON list of {test, tokens_per_second, stddev, samples} (and a "
                    "roofline entry)");
  command->callback([options] {
    Status status = run_bench(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli
