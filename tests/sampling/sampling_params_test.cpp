#include "sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

namespace tachyon {
namespace {

constexpr int32_t kVocab = 1000;

std::string error_of(const std::function<void(SamplingParams&)>& change) {
  SamplingParams params;
  change(params);
  const Status status = params.validate(kVocab);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  return status.message();
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams().validate(kVocab).ok());
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = 5000;  // larger than the vocabulary: simply off
  params.top_p = 1.0f;
  params.min_p = 1.0f;
  params.repetition_penalty = 0.5f;
  params.penalty_last_n = -1;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.logit_bias = {{0, -100.0f}, {999, 100.0f}, {5, -std::numeric_limits<float>::infinity()}};
  params.stop = {"\n\n", "###"};
  params.max_tokens = 1;
  params.logprobs = true;
  params.top_logprobs = 20;
  EXPECT_TRUE(params.validate(kVocab).ok());
  EXPECT_TRUE(params.is_greedy());
}

TEST(SamplingParamsTest, MessagesNameFieldAndValue) {
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 1.5f; }),
            "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature must be a finite number >= 0, got -0.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.temperature = std::nanf(""); }),
            "temperature must be a finite number >= 0, got nan");
  EXPECT_EQ(
      error_of([](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); }),
      "temperature must be a finite number >= 0, got inf");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_k = -1; }),
            "top_k must be >= 0 (0 = off), got -1");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.min_p = 1.25f; }),
            "min_p must be in [0, 1], got 1.25");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.min_p = -0.1f; }),
            "min_p must be in [0, 1], got -0.1");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
            "repetition_penalty must be a finite number > 0, got 0");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.penalty_last_n = -2; }),
            "penalty_last_n must be >= -1 (-1 = whole context, 0 = off), got -2");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
            "presence_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.frequency_penalty = -3.0f; }),
            "frequency_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.logit_bias[1000] = 1.0f; }),
            "logit_bias token id 1000 is out of range for a vocabulary of 1000 tokens");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.logit_bias[-3] = 1.0f; }),
            "logit_bias token id -3 is out of range for a vocabulary of 1000 tokens");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.logit_bias[7] = 150.0f; }),
            "logit_bias for token 7 must be in [-100, 100], got 150");
  EXPECT_EQ(
      error_of([](SamplingParams& p) { p.logit_bias[7] = std::numeric_limits<float>::infinity(); }),
      "logit_bias for token 7 must be in [-100, 100], got inf");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop = {"a", ""}; }), "stop[1] must not be empty");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.max_tokens = 0; }),
            "max_tokens must be >= 1, got 0");
  EXPECT_EQ(error_of([](SamplingParams& p) {
              p.logprobs = true;
              p.top_logprobs = 21;
            }),
            "top_logprobs must be in [0, 20], got 21");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_logprobs = 3; }),
            "top_logprobs is 3 but logprobs is not enabled");
}

}  // namespace
}  // namespace tachyon
