#include "sampling/stop_condition.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tachyon {
namespace {

constexpr TokenId kEos = 2;
constexpr TokenId kEot = 7;
constexpr TokenId kText = 100;  // any ordinary token

struct FedText {
  std::vector<std::string> emitted;  // per push
  std::string text;                  // all of it
  FinishReason finish_reason = FinishReason::kNone;
};

FedText feed(StopCondition& stop, const std::vector<std::string>& pieces) {
  FedText run;
  for (const std::string& piece : pieces) {
    StopUpdate update = stop.push(kText, piece);
    run.emitted.push_back(update.text);
    run.text += update.text;
    if (update.finished()) {
      run.finish_reason = update.finish_reason;
      break;
    }
  }
  return run;
}

TEST(StopConditionTest, StopStringAcrossThreeTokens) {
  StopCondition stop({kEos}, {"<|end|>"}, std::nullopt);
  const FedText run = feed(stop, {"Answer", ": 42", "<|", "end", "|>", "never seen"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"Answer", ": 42", "", "", ""}));
  EXPECT_EQ(run.text, "Answer: 42");
  EXPECT_EQ(run.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stop.matched_stop_string(), "<|end|>");
  EXPECT_FALSE(stop.matched_stop_token());
  EXPECT_EQ(stop.num_tokens(), 5u);
}

TEST(StopConditionTest, TextBeforeStopInSamePieceIsEmittedAndAfterIsDropped) {
  StopCondition stop({kEos}, {"STOP"}, std::nullopt);
  const FedText run = feed(stop, {"hello ", "worldSTOPtrailing"});
  EXPECT_EQ(run.text, "hello world");
  EXPECT_EQ(run.finish_reason, FinishReason::kStop);
}

TEST(StopConditionTest, PartialMatchIsHeldThenReleased) {
  StopCondition stop({kEos}, {"STOP"}, std::nullopt);
  const FedText run = feed(stop, {"go ST", "O", "ne more"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"go ", "", "STOne more"}));
  EXPECT_EQ(run.finish_reason, FinishReason::kNone);
  EXPECT_EQ(stop.num_held_bytes(), 0u);
}

TEST(StopConditionTest, OverlappingPrefixKeepsOnlyWhatCanStillMatch) {
  StopCondition stop({kEos}, {"aab"}, std::nullopt);
  const FedText run = feed(stop, {"a", "a", "a", "b"});
  // After "aaa" only the last "aa" can still start "aab".
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.finish_reason, FinishReason::kStop);
}

TEST(StopConditionTest, TwoStopStringsWithSharedPrefix) {
  {
    StopCondition stop({kEos}, {"foo bar", "foo baz"}, std::nullopt);
    const FedText run = feed(stop, {"x foo ", "ba", "z!"});
    EXPECT_EQ(run.emitted, (std::vector<std::string>{"x ", "", ""}));
    EXPECT_EQ(stop.matched_stop_string(), "foo baz");
  }
  {
    // One is a prefix of the other: the shorter completes first.
    StopCondition stop({kEos}, {"abc", "ab"}, std::nullopt);
    const FedText run = feed(stop, {"1a", "bc"});
    EXPECT_EQ(run.text, "1");
    EXPECT_EQ(stop.matched_stop_string(), "ab");
  }
  {
    // Earliest completion wins even when another stop string starts earlier.
    StopCondition stop({kEos}, {"abcd", "bc"}, std::nullopt);
    const FedText run = feed(stop, {"xabcdy"});
    EXPECT_EQ(run.text, "xa");
    EXPECT_EQ(stop.matched_stop_string(), "bc");
  }
  {
    // Same end: the longer (earlier-starting) one.
    StopCondition stop({kEos}, {"b", "ab"}, std::nullopt);
    const FedText run = feed(stop, {"xab"});
    EXPECT_EQ(run.text, "x");
    EXPECT_EQ(stop.matched_stop_string(), "ab");
  }
}

TEST(StopConditionTest, EosStopsAndReleasesHeldText) {
  StopCondition stop({kEos, kEot}, {"STOP"}, std::nullopt);
  EXPECT_EQ(stop.push(kText, "tail S").text, "tail ");
  const StopUpdate update = stop.push(kEot, "<|eot_id|>");
  EXPECT_EQ(update.text, "S");  // the held "S" was text after all; the EOT's own text is not
  EXPECT_EQ(update.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stop.matched_stop_token(), kEot);
  EXPECT_FALSE(stop.matched_stop_string());
  // Finished: further tokens produce nothing.
  const StopUpdate after = stop.push(kText, "more");
  EXPECT_EQ(after.text, "");
  EXPECT_EQ(after.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stop.num_tokens(), 2u);
}

TEST(StopConditionTest, IgnoreEosTreatsEosAsText) {
  SamplingParams params;
  params.ignore_eos = true;
  StopCondition stop(params, {kEos});
  const StopUpdate update = stop.push(kEos, "");
  EXPECT_FALSE(update.finished());
  EXPECT_EQ(stop.push(kText, "x").text, "x");
}

TEST(StopConditionTest, LengthFinishReleasesHeldText) {
  SamplingParams params;
  params.max_tokens = 3;
  params.stop = {"STOP"};
  StopCondition stop(params, {kEos});
  const FedText run = feed(stop, {"a", "b", "ST", "x"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"a", "b", "ST"}));
  EXPECT_EQ(run.finish_reason, FinishReason::kLength);
  EXPECT_STREQ(finish_reason_name(stop.finish_reason()), "length");
}

TEST(StopConditionTest, StopWinsOverLengthOnTheSameToken) {
  StopCondition stop({kEos}, {"END"}, 2);
  const FedText run = feed(stop, {"ok", "END"});
  EXPECT_EQ(run.text, "ok");
  EXPECT_EQ(run.finish_reason, FinishReason::kStop);
  StopCondition eos_stop({kEos}, {}, 1);
  EXPECT_EQ(eos_stop.push(kEos, "").finish_reason, FinishReason::kStop);
}

TEST(StopConditionTest, FlushReleasesHeldTextOnExternalEnd) {
  StopCondition stop({kEos}, {"</s>"}, std::nullopt);
  EXPECT_EQ(stop.push(kText, "bye </").text, "bye ");
  EXPECT_EQ(stop.flush(), "</");
  EXPECT_EQ(stop.flush(), "");
}

TEST(StopConditionTest, MultiByteStopStrings) {
  StopCondition stop({kEos}, {"。\n"}, std::nullopt);
  const FedText run = feed(stop, {"你好", "。", "\n"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"你好", "", ""}));
  EXPECT_EQ(run.finish_reason, FinishReason::kStop);
}

TEST(StopConditionTest, NoStopStringsPassesEverythingThrough) {
  StopCondition stop({}, {"", ""}, std::nullopt);  // empty stop strings are ignored
  const FedText run = feed(stop, {"a", "", "bc"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"a", "", "bc"}));
  EXPECT_FALSE(stop.finished());
}

// The emitted text must not depend on how the text is split into pieces: compare random splits
// with feeding one byte at a time.
TEST(StopConditionTest, OutputIndependentOfTokenization) {
  std::mt19937 rng(1234);
  const std::string alphabet = "abc";
  auto random_string = [&](size_t min_length, size_t max_length) {
    std::string s(std::uniform_int_distribution<size_t>(min_length, max_length)(rng), ' ');
    for (char& c : s) c = alphabet[std::uniform_int_distribution<size_t>(0, 2)(rng)];
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const int num_stops = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int i = 0; i < num_stops; ++i) stops.push_back(random_string(1, 4));
    const std::string text = random_string(0, 20);

    StopCondition by_byte({kEos}, stops, std::nullopt);
    std::string expected;
    bool expected_stop = false;
    for (char c : text) {
      const StopUpdate update = by_byte.push(kText, std::string(1, c));
      expected += update.text;
      if (update.finished()) {
        expected_stop = true;
        break;
      }
    }
    if (!expected_stop) expected += by_byte.flush();

    StopCondition split({kEos}, stops, std::nullopt);
    std::string actual;
    bool actual_stop = false;
    for (size_t position = 0; position < text.size() && !actual_stop;) {
      const size_t length =
          std::min(text.size() - position, std::uniform_int_distribution<size_t>(0, 6)(rng));
      const StopUpdate update = split.push(kText, text.substr(position, length));
      position += length;
      actual += update.text;
      actual_stop = update.finished();
    }
    if (!actual_stop) actual += split.flush();

    ASSERT_EQ(actual, expected) << "text " << text << " stop[0] " << stops[0];
    ASSERT_EQ(actual_stop, expected_stop) << text;
    if (expected_stop) {
      ASSERT_EQ(split.matched_stop_string(), by_byte.matched_stop_string());
    }
    // And the byte-at-a-time result is the text up to the first stop occurrence's end, cut at
    // that occurrence's start.
    size_t first_end = std::string::npos;
    size_t first_start = std::string::npos;
    for (const std::string& s : stops) {
      const size_t start = text.find(s);
      if (start == std::string::npos) continue;
      const size_t end = start + s.size();
      if (end < first_end || (end == first_end && start < first_start)) {
        first_end = end;
        first_start = start;
      }
    }
    ASSERT_EQ(expected, first_start == std::string::npos ? text : text.substr(0, first_start));
  }
}

}  // namespace
}  // namespace tachyon
