#include "structured/constraint_compiler.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <xgrammar/compiler.h>

#include "structured/grammar_constraint.h"
#include "structured/mask_worker.h"
#include "structured/json_schema_check.h"

namespace tachyon {

namespace {

// Starts the bytes of control tokens: never part of valid UTF-8, so never matched as text.
const std::string kNeverTextByte = "\xFF";

// JSON is generated compactly on one line with a space after ',' and ':' (as json.dumps
// writes it): free whitespace lets small models pad forever, and this is the layout models
// see most.
constexpr bool kAnyWhitespace = false;
const std::pair<std::string, std::string> kSeparators = {", ", ": "};

// Worker threads XGrammar uses to build one grammar's token-mask cache.
constexpr int kCompileThreads = 2;

// XGrammar's messages start with "[hh:mm:ss] /path/file.cc:LINE: " and end in a newline;
// clients get only the message.
std::string library_message(std::string_view text) {
  if (const size_t source = text.find(".cc:"); source != std::string_view::npos) {
    if (const size_t start = text.find(": ", source); start != std::string_view::npos) {
      text.remove_prefix(start + 2);
    }
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return std::string(text);
}

// Structural tags' json_schema regions allow free whitespace; each becomes the same grammar a
// json_schema response_format compiles to (one line, ", " and ": "), so a small model cannot pad
// the arguments of a call forever and JSON looks the same everywhere. Each schema is checked as
// a response_format's is.
Status compact_json_regions(boost::json::value& format) {
  if (boost::json::array* array = format.if_array()) {
    for (boost::json::value& element : *array) TACHYON_RETURN_IF_ERROR(compact_json_regions(element));
    return Status();
  }
  boost::json::object* object = format.if_object();
  if (object == nullptr) return Status();
  const boost::json::value* type = object->if_contains("type");
  const boost::json::value* style = object->if_contains("style");
  const boost::json::value* schema = object->if_contains("json_schema");
  if (type != nullptr && *type == "json_schema" && schema != nullptr &&
      (style == nullptr || *style == "json")) {
    TACHYON_RETURN_IF_ERROR(check_json_schema(*schema));
    const xgrammar::Grammar grammar = xgrammar::Grammar::FromJSONSchema(
        boost::json::serialize(*schema), kAnyWhitespace, std::nullopt, kSeparators,
        /*strict_mode=*/true);
    format = boost::json::object{{"type", "grammar"}, {"grammar", grammar.ToString()}};
    return Status();
  }
  for (auto& [key, value] : *object) TACHYON_RETURN_IF_ERROR(compact_json_regions(value));
  return Status();
}

}  // namespace

struct ConstraintCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, std::shared_ptr<const std::vector<uint8_t>> special,
       std::vector<TokenId> end_of_generation)
      : compiler(info, kCompileThreads, /*cache_enabled=*/false),
        special(std::move(special)),
        end_of_generation(std::move(end_of_generation)) {}

  // Compiles on the calling thread; XGrammar reports problems by throwing.
  Result<std::shared_ptr<const CompiledConstraint>> compile_now(const ConstraintSpec& spec) {
    const char* kind = constraint_kind_name(spec.kind);
    try {
      switch (spec.kind) {
        case ConstraintSpec::Kind::kJsonObject:
          return wrap(compiler.CompileJSONSchema(R"({"type": "object"})", kAnyWhitespace,
                                                 std::nullopt, kSeparators));
        case ConstraintSpec::Kind::kJsonSchema: {
          boost::system::error_code error;
          const boost::json::value schema = boost::json::parse(spec.source, error);
          if (error) return invalid_argument(fmt::format("the JSON schema is not JSON: {}", error.message()));
          TACHYON_RETURN_IF_ERROR(check_json_schema(schema));
          return wrap(compiler.CompileJSONSchema(spec.source, kAnyWhitespace, std::nullopt,
                                                 kSeparators, /*strict_mode=*/true));
        }
        case ConstraintSpec::Kind::kRegex:
          return wrap(compiler.CompileRegex(spec.source));
        case ConstraintSpec::Kind::kGrammar:
          return wrap(compiler.CompileGrammar(spec.source, "root"));
        case ConstraintSpec::Kind::kStructuralTag: {
          boost::system::error_code error;
          boost::json::value tag = boost::json::parse(spec.source, error);
          if (error) return invalid_argument(fmt::format("the structural tag is not JSON: {}", error.message()));
          TACHYON_RETURN_IF_ERROR(compact_json_regions(tag));
          return wrap(compiler.CompileStructuralTag(boost::json::serialize(tag)));
        }
      }
    } catch (const std::exception& e) {
      return invalid_argument(
          fmt::format("the {} could not be compiled: {}", kind, library_message(e.what())));
    }
    return invalid_argument(fmt::format("unknown constraint kind {}", kind));
  }

  static std::shared_ptr<const CompiledConstraint> wrap(xgrammar::CompiledGrammar grammar) {
    return std::make_shared<const CompiledConstraint>(std::move(grammar));
  }

  std::shared_ptr<const CompiledConstraint> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cache.find(key);
    if (found == cache.end()) return nullptr;
    recent.splice(recent.begin(), recent, found->second.second);
    return found->second.first;
  }

  void remember(const std::string& key, std::shared_ptr<const CompiledConstraint> grammar) {
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.count(key)) return;
    recent.push_front(key);
    cache.emplace(key, std::make_pair(std::move(grammar), recent.begin()));
    while (cache.size() > kCacheEntries) {
      cache.erase(recent.back());
      recent.pop_back();
    }
  }

  xgrammar::GrammarCompiler compiler;
  std::shared_ptr<MaskWorker> mask_worker = std::make_shared<MaskWorker>();
  std::shared_ptr<const std::vector<uint8_t>> special;
  std::vector<TokenId> end_of_generation;

  std::mutex mutex;  // guards everything below
  std::list<std::string> recent;  // cache keys, most recently used first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const CompiledConstraint>,
                                            std::list<std::string>::iterator>>
      cache;
  int abandoned = 0;  // compilations still running after their caller gave up
};

Result<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::create(
    const Tokenizer& tokenizer, std::span<const TokenId> end_of_generation, int32_t logits_size,
    std::span<const TokenId> marker_tokens) {
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  if (logits_size < vocabulary.size()) {
    return invalid_argument(fmt::format("the model's {} logits do not cover the {}-token vocabulary",
                                        logits_size, vocabulary.size()));
  }
  // Each token as the bytes it adds to the output. Tokens that are never text (control,
  // unknown, unused) are empty, which XGrammar takes as special: never allowed. The marker
  // tokens get 0xFF and their text instead: no text rule but free text (structural tags'
  // any_text) accepts a byte that is never in UTF-8, and XGrammar does not refuse them
  // outright, so structural tags can name them by id.
  std::vector<std::string> bytes(static_cast<size_t>(vocabulary.size()));
  auto special = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(logits_size), 1);
  for (TokenId id = 0; id < vocabulary.size(); ++id) {
    const TokenType type = vocabulary.types[static_cast<size_t>(id)];
    if (std::find(marker_tokens.begin(), marker_tokens.end(), id) != marker_tokens.end()) {
      bytes[static_cast<size_t>(id)] = kNeverTextByte + vocabulary.tokens[static_cast<size_t>(id)];
    } else if (type != TokenType::kControl && type != TokenType::kUnknown &&
               type != TokenType::kUnused) {
      bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
    }
    (*special)[static_cast<size_t>(id)] = bytes[static_cast<size_t>(id)].empty();
  }
  std::vector<TokenId> stops(end_of_generation.begin(), end_of_generation.end());
  try {
    xgrammar::TokenizerInfo info(bytes, xgrammar::VocabType::RAW, logits_size, stops,
                                 /*add_prefix_space=*/false);
    auto impl = std::make_unique<Impl>(std::move(info), std::move(special), std::move(stops));
    return std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler(std::move(impl), logits_size));
  } catch (const std::exception& e) {
    return invalid_argument(
        fmt::format("the vocabulary cannot drive a grammar: {}", library_message(e.what())));
  }
}

ConstraintCompiler::ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t logits_size)
    : impl_(std::move(impl)), logits_size_(logits_size) {}

ConstraintCompiler::~ConstraintCompiler() = default;

size_t ConstraintCompiler::cache_entries() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->cache.size();
}

struct ConstraintCompiler::Compilation::State {
  std::shared_ptr<Impl> impl;
  mutable std::mutex mutex;
  mutable std::condition_variable done_signal;
  bool done = false;
  bool abandoned = false;
  Result<std::shared_ptr<const CompiledConstraint>> result =
      Status(StatusCode::kInternal, "not compiled yet");
};

bool ConstraintCompiler::Compilation::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

bool ConstraintCompiler::Compilation::wait_for(std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_signal.wait_for(lock, limit, [&] { return state_->done; });
}

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compilation::result() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->result;
}

void ConstraintCompiler::Compilation::abandon() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->done || state_->abandoned) return;
    state_->abandoned = true;
  }
  std::lock_guard<std::mutex> lock(state_->impl->mutex);
  ++state_->impl->abandoned;
}

Result<ConstraintCompiler::Compilation> ConstraintCompiler::begin(const ConstraintSpec& spec) {
  Compilation compilation;
  compilation.state_ = std::make_shared<Compilation::State>();
  compilation.state_->impl = impl_;
  const std::string key = spec.key();
  if (std::shared_ptr<const CompiledConstraint> cached = impl_->find(key)) {
    compilation.state_->result = std::move(cached);
    compilation.state_->done = true;
    return compilation;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->abandoned >= kMaxAbandoned) {
      return unavailable(fmt::format(
          "{} grammar compilations that ran past their time limit are still running; try again "
          "later",
          impl_->abandoned));
    }
  }
  std::thread([state = compilation.state_, spec, key] {
    Result<std::shared_ptr<const CompiledConstraint>> result = state->impl->compile_now(spec);
    if (result.ok()) state->impl->remember(key, *result);
    bool abandoned;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->result = std::move(result);
      state->done = true;
      abandoned = state->abandoned;
    }
    state->done_signal.notify_all();
    if (abandoned) {
      std::lock_guard<std::mutex> lock(state->impl->mutex);
      --state->impl->abandoned;
    }
  }).detach();
  return compilation;
}

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(
    const ConstraintSpec& spec, std::chrono::milliseconds limit) {
  TACHYON_ASSIGN_OR_RETURN(Compilation compilation, begin(spec));
  if (!compilation.wait_for(limit)) {
    compilation.abandon();
    return deadline_exceeded(fmt::format("the {} took longer than {} ms to compile",
                                         constraint_kind_name(spec.kind), limit.count()));
  }
  return compilation.result();
}

std::unique_ptr<TokenConstraint> ConstraintCompiler::start(
    const std::shared_ptr<const CompiledConstraint>& grammar) const {
  return std::make_unique<GrammarConstraint>(grammar->grammar, impl_->special,
                                             impl_->end_of_generation, impl_->mask_worker);
}

}  // namespace tachyon
