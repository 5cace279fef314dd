// Speculative decoding in the serving engine never changes an output: with each proposer on,
// every request's tokens, text, finish reason, logprobs and stream are what they are with it
// off, greedy and seeded sampling alike, alone and in batches with preemption; rejected drafts
// leave the KV pool and the prefix cache as a run that never drafted would; and the shared
// suffix cache never proposes one tenant's text to another. Every check also asserts that
// drafts were made and accepted, so none can pass with speculation silently off.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/paths.h"
#include "engine_test_util.h"
#include "model_files/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/generator.h"

namespace tachyon {
namespace {

using testing_util::expect_pool_back_to_full;
using testing_util::greedy_request;
using testing_util::LoadedModel;
using testing_util::make_engine;
using testing_util::run_alone;
using testing_util::settled_metrics;

// One thread: outputs are the same bits at any thread count, and ctest runs other tests beside
// these (two spinning threads per process on a 2-core machine slow both down several times).
constexpr int kThreads = 1;

// The default model (SmolLM2-135M-Instruct, Q4_1), loaded once for the whole file.
LoadedModel& default_model() {
  static LoadedModel loaded = testing_util::load_model(default_model_path());
  return loaded;
}

std::string shakespeare() {
  std::ifstream file(std::string(TACHYON_SHARED_DIR) + "/data/corpus/tinyshakespeare.txt");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Input-grounded prompts (copy, quote, correct a passage) over Shakespeare: the kind of work
// where prompt lookup guesses well. Passage i starts at a line of its own.
std::vector<std::string> grounded_texts(int count) {
  static const std::string corpus = shakespeare();
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    size_t start = corpus.find('\n', (static_cast<size_t>(i) * 104729) % (corpus.size() - 4000));
    start += 1;
    size_t end = start;
    for (int line = 0; line < 6; ++line) end = corpus.find('\n', end) + 1;
    const std::string passage = corpus.substr(start, end - start);
    const std::string first_line = passage.substr(0, passage.find('\n') + 1);
    switch (i % 4) {
      case 0:
        texts.push_back("Repeat the following passage exactly.\n\n" + passage +
                        "\nRepeated passage:\n" + first_line);
        break;
      case 1:
        texts.push_back(passage + "\nThe passage above, word for word:\n" + first_line);
        break;
      case 2:
        texts.push_back("Text:\n" + passage + "\nQuestion: Who speaks in the text, and what do "
                        "they say?\nAnswer:");
        break;
      default:
        texts.push_back("Fix the punctuation of this text and return all of it:\n" + passage +
                        "\nFixed text:\n");
    }
  }
  return texts;
}

std::vector<TokenId> encode(const std::string& text) {
  return default_model().tokenizer->encode(text, {.parse_special = true, .add_special = true});
}

EngineOptions speculative_options(SpeculativeMode mode) {
  EngineOptions options;
  options.kv_cache_bytes = 64 << 20;
  options.speculative.mode = mode;
  options.speculative.max_draft_tokens = 8;
  return options;
}

// The default model as its own draft model.
DraftModelRef self_draft() { return {default_model().model.get(), default_model().tokenizer.get()}; }

std::unique_ptr<Engine> engine_with(SpeculativeMode mode, ThreadPool& pool,
                                    EngineOptions options = EngineOptions()) {
  EngineOptions with = options;
  if (options.kv_cache_bytes == 0) with = speculative_options(mode);
  with.speculative.mode = mode;
  with.speculative.max_draft_tokens = 8;
  // Always verify 8 guesses: how many the adaptive sizing verifies depends on how fast this
  // machine runs steps of each size (under the sanitizers, or for the model drafting for
  // itself, none pay), and these tests must draft on every machine. The adaptive engine is
  // checked too (GreedyOutputsAreUnchangedByEveryProposer).
  with.speculative.adaptive = false;
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*default_model().model, *default_model().tokenizer, pool, with,
                     mode == SpeculativeMode::kDraft ? self_draft() : DraftModelRef());
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(*engine) : nullptr;
}

void expect_same_output(const EngineOutput& expected, const EngineOutput& actual,
                        const std::string& what) {
  EXPECT_EQ(actual.tokens, expected.tokens) << what;
  EXPECT_EQ(actual.text, expected.text) << what;
  EXPECT_EQ(actual.finish_reason, expected.finish_reason) << what;
  EXPECT_EQ(actual.completion_tokens, expected.completion_tokens) << what;
  EXPECT_EQ(actual.prompt_tokens, expected.prompt_tokens) << what;
  ASSERT_EQ(actual.logprobs.size(), expected.logprobs.size()) << what;
  for (size_t i = 0; i < expected.logprobs.size(); ++i) {
    EXPECT_EQ(actual.logprobs[i].chosen.token, expected.logprobs[i].chosen.token) << what;
    EXPECT_EQ(actual.logprobs[i].chosen.logprob, expected.logprobs[i].chosen.logprob) << what;
    ASSERT_EQ(actual.logprobs[i].top.size(), expected.logprobs[i].top.size()) << what;
    for (size_t j = 0; j < expected.logprobs[i].top.size(); ++j) {
      EXPECT_EQ(actual.logprobs[i].top[j].token, expected.logprobs[i].top[j].token) << what;
      EXPECT_EQ(actual.logprobs[i].top[j].logprob, expected.logprobs[i].top[j].logprob) << what;
    }
  }
}

// Drafts verified and accepted by an engine, over every source.
std::pair<uint64_t, uint64_t> draft_counts(const Engine& engine) {
  const EngineMetrics metrics = settled_metrics(engine);
  uint64_t drafted = 0, accepted = 0;
  for (int s = 0; s < kNumDraftSources; ++s) {
    drafted += metrics.draft_tokens_total[s];
    accepted += metrics.accepted_draft_tokens_total[s];
  }
  return {drafted, accepted};
}

// 14 greedy requests, each alone: the same output with prompt lookup, with the suffix cache
// and with a draft model (the model itself) as without speculation.
TEST(SpeculativeEngineTest, GreedyOutputsAreUnchangedByEveryProposer) {
  ThreadPool pool(kThreads);
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool);
  std::unique_ptr<Engine> ngram = engine_with(SpeculativeMode::kNgram, pool);
  std::unique_ptr<Engine> suffix = engine_with(SpeculativeMode::kSuffix, pool);
  std::unique_ptr<Engine> draft = engine_with(SpeculativeMode::kDraft, pool);
  // Drafting as much as pays on this machine (maybe nothing): the same outputs either way.
  EngineOptions adaptive_options = speculative_options(SpeculativeMode::kSuffix);
  std::unique_ptr<Engine> adaptive =
      make_engine(default_model(), pool, adaptive_options);
  ASSERT_TRUE(off && ngram && suffix && draft && adaptive);
  const std::vector<std::string> texts = grounded_texts(14);
  int with_drafts = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EngineRequest request = greedy_request(encode(texts[i]), 40);
    request.sampling.ignore_eos = false;
    const EngineOutput expected = run_alone(*off, request);
    ASSERT_TRUE(expected.status.ok()) << expected.status.message();
    EXPECT_EQ(expected.draft_tokens, 0);
    for (Engine* engine : {ngram.get(), suffix.get(), draft.get()}) {
      const EngineOutput actual = run_alone(*engine, request);
      ASSERT_TRUE(actual.status.ok()) << actual.status.message();
      expect_same_output(expected, actual, "prompt " + std::to_string(i));
      if (actual.accepted_draft_tokens > 0) ++with_drafts;
    }
    expect_same_output(expected, run_alone(*adaptive, request), "adaptive " + std::to_string(i));
  }
  EXPECT_GE(with_drafts, 21) << "of 42 runs, too few accepted a draft";
  // The model as its own draft guesses its own greedy tokens: (nearly) all are accepted.
  const auto [self_drafted, self_accepted] = draft_counts(*draft);
  EXPECT_GT(self_drafted, 200u);
  EXPECT_GE(static_cast<double>(self_accepted), 0.95 * self_drafted);
  EXPECT_GT(settled_metrics(*draft).drafts_total[static_cast<int>(DraftSource::kDraft)], 0u);
  for (Engine* engine : {ngram.get(), suffix.get(), draft.get()}) {
    const auto [drafted, accepted] = draft_counts(*engine);
    EXPECT_GT(drafted, 0u);
    EXPECT_GT(accepted, drafted / 4) << "acceptance on copy tasks is far too low";
    expect_pool_back_to_full(*engine);
  }
  EXPECT_EQ(draft_counts(*off).first, 0u);
}

// Seeded sampling with every processor on (temperature, top-p, penalties, logit bias) and
// logprobs: the same tokens, draws and logprobs with speculation as without.
TEST(SpeculativeEngineTest, SeededSamplingIsUnchanged) {
  ThreadPool pool(kThreads);
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool);
  std::unique_ptr<Engine> on = engine_with(SpeculativeMode::kSuffix, pool);
  std::unique_ptr<Engine> draft = engine_with(SpeculativeMode::kDraft, pool);
  ASSERT_TRUE(off && on && draft);
  const std::vector<std::string> texts = grounded_texts(8);
  for (size_t i = 0; i < texts.size(); ++i) {
    EngineRequest request;
    request.prompt = encode(texts[i]);
    request.sampling.temperature = 0.8f;
    request.sampling.top_p = 0.95f;
    request.sampling.repetition_penalty = 1.05f;
    request.sampling.presence_penalty = 0.2f;
    request.sampling.frequency_penalty = 0.1f;
    request.sampling.logit_bias = {{13, -2.0f}, {28, 1.5f}};
    request.sampling.seed = 1000 + i;
    request.sampling.max_tokens = 32;
    request.sampling.logprobs = true;
    request.sampling.top_logprobs = 3;
    const EngineOutput expected = run_alone(*off, request);
    for (Engine* engine : {on.get(), draft.get()}) {
      const EngineOutput actual = run_alone(*engine, request);
      ASSERT_TRUE(actual.status.ok()) << actual.status.message();
      expect_same_output(expected, actual, "prompt " + std::to_string(i));
    }
  }
  for (Engine* engine : {on.get(), draft.get()}) {
    const auto [drafted, accepted] = draft_counts(*engine);
    EXPECT_GT(accepted, 0u);
    EXPECT_GT(drafted, accepted);  // some drafts were rejected too (the draft guesses greedily)
    expect_pool_back_to_full(*engine);
  }
}

// 16 requests at once in too little KV memory (preemption and recomputation) with drafts on:
// each gives what it gives alone without speculation.
TEST(SpeculativeEngineTest, BatchWithPreemptionIsUnchanged) {
  ThreadPool pool(kThreads);
  const ModelConfig& config = default_model().model->config();
  EngineOptions options;
  options.max_batch_tokens = 64;
  options.enable_prefix_cache = false;
  options.kv_cache_bytes = static_cast<int64_t>(PagedKvCache::block_bytes(
                               config.num_layers, config.kv_size(), 16, DType::kF16)) * 40;
  options.speculative.max_sequences = 16;  // speculate in every decode step
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool, options);
  std::unique_ptr<Engine> ngram = engine_with(SpeculativeMode::kNgram, pool, options);
  std::unique_ptr<Engine> draft = engine_with(SpeculativeMode::kDraft, pool, options);
  ASSERT_TRUE(off && ngram && draft);
  const std::vector<std::string> texts = grounded_texts(16);
  std::vector<EngineOutput> alone;
  for (const std::string& text : texts) alone.push_back(run_alone(*off, greedy_request(encode(text), 48)));
  for (Engine* on : {ngram.get(), draft.get()}) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const std::string& text : texts) {
      streams.push_back(std::move(on->submit(greedy_request(encode(text), 48))).value());
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      const EngineOutput together = streams[i]->wait_for_all();
      ASSERT_TRUE(together.status.ok()) << together.status.message();
      expect_same_output(alone[i], together, "request " + std::to_string(i));
    }
    const EngineMetrics metrics = settled_metrics(*on);
    EXPECT_GT(metrics.preemptions_total, 0u);
    EXPECT_GT(draft_counts(*on).second, 0u);
    expect_pool_back_to_full(*on);
  }
}

// max_tokens and stop strings that fall inside an accepted draft, and end-of-generation tokens
// proposed by the lookup itself: the output ends exactly where it ends without speculation,
// and the streamed deltas add up to the same text.
TEST(SpeculativeEngineTest, StopsInsideDraftsAndStreamsTheSameText) {
  ThreadPool pool(kThreads);
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool);
  std::unique_ptr<Engine> on = engine_with(SpeculativeMode::kNgram, pool);
  ASSERT_TRUE(off && on);
  const std::vector<std::string> texts = grounded_texts(4);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<TokenId> prompt = encode(texts[i]);
    const EngineOutput reference = run_alone(*off, greedy_request(prompt, 48));
    ASSERT_GE(reference.text.size(), 40u);
    for (int max_tokens : {1, 2, 3, 5, 8, 13, 21, 34}) {
      EngineRequest request = greedy_request(prompt, max_tokens);
      expect_same_output(run_alone(*off, request), run_alone(*on, request),
                         "max_tokens " + std::to_string(max_tokens));
    }
    for (size_t at : {5u, 12u, 20u, 33u}) {
      EngineRequest request = greedy_request(prompt, 48);
      request.sampling.stop = {reference.text.substr(at, 3)};
      expect_same_output(run_alone(*off, request), run_alone(*on, request),
                         "stop '" + request.sampling.stop[0] + "'");
    }
    // Streamed: every event's text, in order, is the whole text.
    auto stream = std::move(on->submit(greedy_request(prompt, 48))).value();
    std::string streamed;
    std::vector<TokenId> tokens;
    for (;;) {
      std::optional<EngineOutput> event = stream->pop(std::chrono::seconds(60));
      ASSERT_TRUE(event.has_value());
      streamed += event->text;
      tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
      if (event->finished) break;
    }
    EXPECT_EQ(streamed, reference.text);
    EXPECT_EQ(tokens, reference.tokens);
  }
  // A chat that answered the same question before: the lookup proposes the earlier answer
  // with its end-of-turn token, and the answer ends on that token as it does without drafts.
  const std::string turn = "<|im_start|>user\nSay: the quality of mercy is not strained<|im_end|>\n"
                           "<|im_start|>assistant\nthe quality of mercy is not strained<|im_end|>\n";
  const std::vector<TokenId> chat =
      encode(turn + turn + "<|im_start|>user\nSay: the quality of mercy is not strained"
                           "<|im_end|>\n<|im_start|>assistant\n");
  EngineRequest request = greedy_request(chat, 30);
  request.sampling.ignore_eos = false;
  const EngineOutput expected = run_alone(*off, request);
  const EngineOutput actual = run_alone(*on, request);
  expect_same_output(expected, actual, "chat");
  EXPECT_EQ(actual.finish_reason, FinishReason::kStop);
  EXPECT_GT(actual.accepted_draft_tokens, 3);
  EXPECT_GT(draft_counts(*on).second, 0u);
  expect_pool_back_to_full(*on);
}

// After rejected drafts the pool and the prefix cache hold what they hold without
// speculation: the same cached blocks, and a follow-up turn finds the same prefix.
TEST(SpeculativeEngineTest, RejectedDraftsLeaveThePoolAndPrefixCacheAsWithout) {
  ThreadPool pool(kThreads);
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool);
  std::unique_ptr<Engine> on = engine_with(SpeculativeMode::kNgram, pool);
  ASSERT_TRUE(off && on);
  const std::vector<std::string> texts = grounded_texts(8);
  for (const std::string& text : texts) {
    const std::vector<TokenId> prompt = encode(text);
    const EngineOutput first_off = run_alone(*off, greedy_request(prompt, 37));
    const EngineOutput first_on = run_alone(*on, greedy_request(prompt, 37));
    expect_same_output(first_off, first_on, text);
    std::vector<TokenId> follow_up = prompt;
    follow_up.insert(follow_up.end(), first_on.tokens.begin(), first_on.tokens.end());
    const EngineOutput second_off = run_alone(*off, greedy_request(follow_up, 5));
    const EngineOutput second_on = run_alone(*on, greedy_request(follow_up, 5));
    EXPECT_EQ(second_on.cached_prompt_tokens, second_off.cached_prompt_tokens);
    EXPECT_GT(second_on.cached_prompt_tokens, static_cast<int>(prompt.size()) / 2);
    expect_same_output(second_off, second_on, text);
  }
  const EngineMetrics metrics_off = settled_metrics(*off);
  const EngineMetrics metrics_on = settled_metrics(*on);
  EXPECT_EQ(metrics_on.kv_blocks_cached, metrics_off.kv_blocks_cached);
  EXPECT_EQ(metrics_on.kv_blocks_used, 0);
  EXPECT_EQ(metrics_on.prefix_cache_hit_tokens_total, metrics_off.prefix_cache_hit_tokens_total);
  const auto [drafted, accepted] = draft_counts(*on);
  EXPECT_GT(drafted, accepted);  // some were rejected
  EXPECT_GT(accepted, 0u);
}

// The suffix cache proposes a tenant's earlier text back to that tenant only (and only under
// the same cache salt); a request may opt out of speculation.
TEST(SpeculativeEngineTest, SuffixCacheNeverCrossesTenants) {
  ThreadPool pool(kThreads);
  std::unique_ptr<Engine> on = engine_with(SpeculativeMode::kSuffix, pool);
  std::unique_ptr<Engine> off = engine_with(SpeculativeMode::kOff, pool);
  ASSERT_TRUE(on && off);
  const std::string passage = grounded_texts(1)[0];
  auto suffix_drafts = [&] {
    return settled_metrics(*on).drafts_total[static_cast<int>(DraftSource::kSuffix)];
  };
  EngineRequest first = greedy_request(encode(passage), 40);
  first.tenant = 1;
  run_alone(*on, first);
  // The follow-up asks for a passage only tenant 1 has sent.
  const std::string quote = passage.substr(passage.find("\n\n") + 2, 60);
  EngineRequest probe = greedy_request(encode("Go on: " + quote), 24);
  const EngineOutput expected = run_alone(*off, probe);
  for (uint64_t tenant : {2, 3}) {
    probe.tenant = tenant;
    expect_same_output(expected, run_alone(*on, probe), "tenant " + std::to_string(tenant));
  }
  probe.tenant = 1;
  probe.cache_salt = "other";
  expect_same_output(expected, run_alone(*on, probe), "salted");
  EXPECT_EQ(suffix_drafts(), 0u) << "another tenant's text was proposed";
  probe.cache_salt.clear();
  probe.speculate = false;
  const EngineOutput opted_out = run_alone(*on, probe);
  expect_same_output(expected, opted_out, "opted out");
  EXPECT_EQ(opted_out.draft_tokens, 0);
  EXPECT_EQ(suffix_drafts(), 0u);
  probe.speculate = true;
  const EngineOutput own = run_alone(*on, probe);
  expect_same_output(expected, own, "tenant 1");
  EXPECT_GT(suffix_drafts(), 0u) << "tenant 1's own text was not proposed back";
}

// The single-sequence Generator (`generate`, `chat`, `bench`) speculates the same way: greedy
// and seeded outputs unchanged, with drafts made and accepted, and its cache still reusable by
// the next prompt (a chat's next turn).
TEST(SpeculativeGeneratorTest, OutputsAreUnchanged) {
  LoadedModel& loaded = default_model();
  ThreadPool pool(kThreads);
  const std::vector<std::string> texts = grounded_texts(8);
  // Even prompts greedy, odd ones seeded sampling with penalties.
  auto params_for = [](size_t i) {
    SamplingParams params;
    params.max_tokens = 40;
    if (i % 2 == 0) {
      params.temperature = 0;
    } else {
      params.temperature = 0.8f;
      params.top_p = 0.95f;
      params.repetition_penalty = 1.05f;
      params.seed = i;
    }
    return params;
  };
  // The next turn: prompt + answer + more reuses the whole cached conversation.
  auto follow_up_of = [](const std::vector<TokenId>& prompt, const std::vector<TokenId>& answer) {
    std::vector<TokenId> follow_up = prompt;
    follow_up.insert(follow_up.end(), answer.begin(), answer.end());
    follow_up.push_back(prompt[1]);
    return follow_up;
  };
  // Without speculation, once: each prompt, then its next turn (6 tokens).
  struct Expected {
    GenerationOutput answer, next;
  };
  std::vector<Expected> expected;
  {
    Generator plain(*loaded.model, *loaded.tokenizer, pool, 2048);
    for (size_t i = 0; i < texts.size(); ++i) {
      SamplingParams params = params_for(i);
      const std::vector<TokenId> prompt = encode(texts[i]);
      Result<GenerationOutput> answer = plain.generate(prompt, params, [](std::string_view) {});
      ASSERT_TRUE(answer.ok());
      params.max_tokens = 6;
      Result<GenerationOutput> next =
          plain.generate(follow_up_of(prompt, answer->tokens), params, [](std::string_view) {});
      ASSERT_TRUE(next.ok());
      expected.push_back({std::move(*answer), std::move(*next)});
    }
  }
  std::unique_ptr<DraftModelRunner> self_draft =
      std::move(DraftModelRunner::create(*loaded.model, *loaded.tokenizer, *loaded.model,
                                         *loaded.tokenizer, pool, 2048 / 16 + 1, 16, DType::kF16))
          .value();
  for (SpeculativeMode mode :
       {SpeculativeMode::kNgram, SpeculativeMode::kSuffix, SpeculativeMode::kDraft}) {
    Generator speculative(*loaded.model, *loaded.tokenizer, pool, 2048);
    SpeculativeOptions options;
    options.mode = mode;
    options.max_draft_tokens = 6;
    options.adaptive = false;  // draft on every machine (see engine_with)
    ASSERT_TRUE(speculative.set_speculation(options, self_draft.get()).ok());
    int accepted = 0, drafted = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      SamplingParams params = params_for(i);
      std::string streamed;
      auto collect = [&](std::string_view piece) { streamed += piece; };
      const std::vector<TokenId> prompt = encode(texts[i]);
      Result<GenerationOutput> actual = speculative.generate(prompt, params, collect);
      ASSERT_TRUE(actual.ok());
      EXPECT_EQ(actual->tokens, expected[i].answer.tokens) << "prompt " << i;
      EXPECT_EQ(actual->text, expected[i].answer.text) << "prompt " << i;
      EXPECT_EQ(streamed, expected[i].answer.text);
      EXPECT_EQ(actual->finish_reason, expected[i].answer.finish_reason);
      accepted += actual->accepted_draft_tokens;
      drafted += actual->draft_tokens;
      params.max_tokens = 6;
      Result<GenerationOutput> next =
          speculative.generate(follow_up_of(prompt, actual->tokens), params, [](std::string_view) {});
      ASSERT_TRUE(next.ok());
      EXPECT_EQ(next->tokens, expected[i].next.tokens);
      EXPECT_EQ(next->cached_prompt_tokens, expected[i].next.cached_prompt_tokens);
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(drafted, accepted);
  }
}

// A draft model must share the model's vocabulary: checked when the engine is made, with a
// message that says what differs; draft mode without a model is refused too.
TEST(SpeculativeEngineTest, DraftModelVocabularyMustAgree) {
  const Vocabulary& vocabulary = default_model().tokenizer->vocabulary();
  Vocabulary other = vocabulary;
  other.tokens[100] = "something else";
  Status status = DraftModelRunner::check_vocabularies(other, vocabulary);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("token 100"), std::string::npos) << status.message();
  other.tokens.pop_back();
  status = DraftModelRunner::check_vocabularies(other, vocabulary);
  EXPECT_NE(status.message().find("49151 tokens but the model's has 49152"), std::string::npos)
      << status.message();
  EXPECT_TRUE(DraftModelRunner::check_vocabularies(vocabulary, vocabulary).ok());
  ThreadPool pool(kThreads);
  EngineOptions options = speculative_options(SpeculativeMode::kDraft);
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*default_model().model, *default_model().tokenizer, pool, options);
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("draft model"), std::string::npos);
}

}  // namespace
}  // namespace tachyon
