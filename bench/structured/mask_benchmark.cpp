// Constrained-decoding cost on one model's vocabulary: for each JSON schema of a suite, the
// compile time, then the time of each token mask (ConstraintCompiler's GrammarConstraint::mask
// on a logits row, one thread) along a random walk of allowed tokens, and of the bitmask alone
// (XGrammar's matcher, before the logits are set). Prints one JSON object.
//
//   build/bench/mask_benchmark MODEL.gguf SCHEMAS.json [STEPS]
//
// SCHEMAS.json: a JSON array of schemas (bench/structured_output_bench.py writes the suite of
// tests/api/schema_suite.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <xgrammar/matcher.h>

#include "structured/constraint_compiler.h"
#include "model_files/gguf_file.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[index];
}

double mean(const std::vector<double>& values) {
  double total = 0.0;
  for (double v : values) total += v;
  return values.empty() ? 0.0 : total / static_cast<double>(values.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tachyon;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf SCHEMAS.json [STEPS]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 3 ? std::atoi(argv[3]) : 48;
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().message().c_str());
    return 1;
  }
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(**file);
  if (!tokenizer.ok()) return 1;
  const std::vector<TokenId> stops =
      Generator::end_of_generation_tokens((*tokenizer)->vocabulary());
  const int32_t vocab = (*tokenizer)->vocabulary_size();
  Result<std::unique_ptr<ConstraintCompiler>> compiler =
      ConstraintCompiler::create(**tokenizer, stops, vocab);
  if (!compiler.ok()) return 1;
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  const boost::json::array schemas = boost::json::parse(text.str()).as_array();

  std::vector<double> compile_ms, mask_us, bitmask_us, accept_us;
  int supported = 0;
  std::vector<std::pair<double, int>> slowest;  // (a schema's slowest bitmask µs, its index)
  std::vector<std::pair<double, int>> slowest_compile;  // (compile ms, schema index)
  int schema_index = -1;
  std::vector<std::string> refused;
  std::mt19937_64 rng(1);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (const boost::json::value& schema : schemas) {
    ++schema_index;
    const ConstraintSpec spec{ConstraintSpec::Kind::kJsonSchema, boost::json::serialize(schema)};
    const auto start = Clock::now();
    Result<std::shared_ptr<const CompiledConstraint>> grammar =
        (*compiler)->compile(spec, std::chrono::seconds(60));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!grammar.ok()) {
      refused.push_back(grammar.status().message());
      continue;
    }
    ++supported;
    compile_ms.push_back(ms);
    slowest_compile.emplace_back(ms, schema_index);
    std::unique_ptr<TokenConstraint> constraint = (*compiler)->start(*grammar);
    // The same walk on a bare matcher, for the bitmask alone (without setting the logits).
    xgrammar::GrammarMatcher matcher((*grammar)->grammar);
    std::vector<int32_t> bitmask(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab)));
    int64_t bitmask_shape[1] = {static_cast<int64_t>(bitmask.size())};
    DLTensor bitmask_tensor{};
    bitmask_tensor.data = bitmask.data();
    bitmask_tensor.device = DLDevice{kDLCPU, 0};
    bitmask_tensor.ndim = 1;
    bitmask_tensor.dtype = xgrammar::GetBitmaskDLType();
    bitmask_tensor.shape = bitmask_shape;
    slowest.emplace_back(0.0, schema_index);
    for (int step = 0; step < steps; ++step) {
      const auto bitmask_start = Clock::now();
      matcher.FillNextTokenBitmask(&bitmask_tensor);
      bitmask_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - bitmask_start).count());
      slowest.back().first = std::max(slowest.back().first, bitmask_us.back());
      std::fill(logits.begin(), logits.end(), 0.0f);
      const auto mask_start = Clock::now();
      constraint->mask(logits);
      mask_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - mask_start).count());
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < vocab; ++id) {
        if (std::isfinite(logits[static_cast<size_t>(id)]) &&
            std::find(stops.begin(), stops.end(), id) == stops.end()) {
          allowed.push_back(id);
        }
      }
      if (allowed.empty()) break;
      const TokenId token = allowed[rng() % allowed.size()];
      const auto accept_start = Clock::now();
      constraint->accept(token);
      matcher.AcceptToken(token);
      accept_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - accept_start).count());
    }
  }
  boost::json::object out{
      {"vocabulary", vocab},
      {"schemas", schemas.size()},
      {"supported", supported},
      {"compile_ms", boost::json::object{{"mean", mean(compile_ms)},
                                         {"p50", percentile(compile_ms, 0.5)},
                                         {"p99", percentile(compile_ms, 0.99)},
                                         {"max", percentile(compile_ms, 1.0)}}},
      {"mask_us", boost::json::object{{"count", mask_us.size()},
                                      {"mean", mean(mask_us)},
                                      {"p50", percentile(mask_us, 0.5)},
                                      {"p99", percentile(mask_us, 0.99)}}},
      {"bitmask_us", boost::json::object{{"mean", mean(bitmask_us)},
                                         {"p50", percentile(bitmask_us, 0.5)},
                                         {"p99", percentile(bitmask_us, 0.99)}}},
      {"accept_us", boost::json::object{{"mean", mean(accept_us)},
                                        {"p99", percentile(accept_us, 0.99)}}},
  };
  std::sort(slowest.rbegin(), slowest.rend());
  boost::json::array slow_schemas;
  for (size_t i = 0; i < std::min<size_t>(5, slowest.size()); ++i) {
    slow_schemas.push_back(boost::json::object{{"schema", slowest[i].second},
                                               {"bitmask_us", slowest[i].first}});
  }
  out["slowest_bitmask"] = slow_schemas;
  std::sort(slowest_compile.rbegin(), slowest_compile.rend());
  boost::json::array slow_compiles;
  for (size_t i = 0; i < std::min<size_t>(5, slowest_compile.size()); ++i) {
    slow_compiles.push_back(boost::json::object{{"schema", slowest_compile[i].second},
                                                {"compile_ms", slowest_compile[i].first}});
  }
  out["slowest_compile"] = slow_compiles;
  boost::json::array reasons;
  for (const std::string& reason : refused) reasons.push_back(boost::json::string(reason));
  out["refused"] = reasons;
  std::printf("%s\n", boost::json::serialize(out).c_str());
  return 0;
}
