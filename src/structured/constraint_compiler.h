// Turns a ConstraintSpec into a compiled grammar for one model's vocabulary, and starts
// per-request constraints from it. One per served model; thread-safe (the server's request
// threads compile, the engine thread runs the constraints).
//
// Compiling a JSON schema or grammar builds XGrammar's token-mask cache over the vocabulary,
// which for pathological inputs can take very long: each compilation runs on a thread of its
// own and the caller stops waiting after the time limit (kDeadlineExceeded; the work finishes in
// the background and fills the cache, at most kMaxAbandoned at a time, beyond which new
// compilations are refused with kUnavailable). Results are cached by the spec's text.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include <xgrammar/compiler.h>

#include "structured/constraint_spec.h"
#include "core/status.h"
#include "sampling/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

// A grammar compiled for one vocabulary: shared, read-only, by every request that uses it.
struct CompiledConstraint {
  explicit CompiledConstraint(xgrammar::CompiledGrammar grammar) : grammar(std::move(grammar)) {}
  xgrammar::CompiledGrammar grammar;
};

class ConstraintCompiler {
 public:
  // `end_of_generation`: the tokens that end an answer (the grammar allows them once it is
  // complete). `logits_size`: the model's output width (>= the vocabulary; ids past the
  // vocabulary are never allowed). `marker_tokens`: control tokens that structural tags name by
  // id (tool-call markers, see server/tool_calling.h); other control tokens are never allowed
  // but as ends.
  static Result<std::unique_ptr<ConstraintCompiler>> create(
      const Tokenizer& tokenizer, std::span<const TokenId> end_of_generation, int32_t logits_size,
      std::span<const TokenId> marker_tokens = {});
  ~ConstraintCompiler();

  // A compilation running on a thread of its own.
  class Compilation {
   public:
    bool done() const;
    // Waits at most `limit` for it; true when done.
    bool wait_for(std::chrono::milliseconds limit) const;
    // Once done(): the grammar, or what is wrong with the schema, regex or grammar
    // (kInvalidArgument, kUnsupported naming the feature).
    Result<std::shared_ptr<const CompiledConstraint>> result() const;
    // The caller stops waiting: it finishes in the background (and fills the cache), counted
    // against kMaxAbandoned until then.
    void abandon();

   private:
    friend class ConstraintCompiler;
    struct State;
    std::shared_ptr<State> state_;
  };

  // Starts compiling `spec` (done at once when it is in the cache); kUnavailable while
  // kMaxAbandoned abandoned compilations still run.
  Result<Compilation> begin(const ConstraintSpec& spec);
  // begin() and wait: kDeadlineExceeded past `limit` (the compilation is abandoned).
  Result<std::shared_ptr<const CompiledConstraint>> compile(const ConstraintSpec& spec,
                                                            std::chrono::milliseconds limit);
  // A fresh constraint at the start of the output.
  std::unique_ptr<TokenConstraint> start(const std::shared_ptr<const CompiledConstraint>& grammar) const;

  int32_t logits_size() const { return logits_size_; }
  size_t cache_entries() const;

  static constexpr size_t kCacheEntries = 256;
  static constexpr int kMaxAbandoned = 2;

 private:
  struct Impl;
  ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t logits_size);

  std::shared_ptr<Impl> impl_;  // shared with compilations still running in the background
  int32_t logits_size_;
};

}  // namespace tachyon
