// The speculative-decoding flags shared by `generate`, `chat`, `bench` and `serve`:
// --speculative MODE, --spec-max-tokens N, --draft-model FILE (serve adds --spec-max-sequences
// and --spec-suffix-cache-tokens).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "cli/model_path.h"
#include "cli/model_session.h"
#include "runtime/draft_model_runner.h"
#include "runtime/engine.h"
#include "speculative/speculative_options.h"

namespace tachyon::cli {

struct SpeculationFlags {
  std::string mode = "off";
  std::string draft_model_path;
  SpeculativeOptions options;

  // Parses --speculative into options.mode (--draft-model alone means draft); errors name the
  // flags and values.
  Status finish();
};

// The draft model of --draft-model, loaded (empty when none was given).
struct DraftSession {
  ModelFiles files;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DecoderModel> model;

  DraftModelRef ref() { return {model.get(), tokenizer.get()}; }
};
Result<DraftSession> open_draft_model(const SpeculationFlags& flags);

// The draft's runner for a single-sequence command: a KV cache of the session's context.
Result<std::unique_ptr<DraftModelRunner>> make_draft_runner(DraftSession& draft,
                                                            const ModelSession& session);

void add_speculation_flags(CLI::App& command, SpeculationFlags& flags, bool serving = false);

// The speculation counts of a run as `generate --json` and `bench --json` print them: drafts
// verified, their tokens, the accepted ones, and the rates derived from them.
boost::json::object speculation_json(SpeculativeMode mode, int64_t drafts, int64_t draft_tokens,
                                     int64_t accepted);

}  // namespace tachyon::cli
