// fit_conversation: the oldest whole turns go first, the system messages and the last user turn
// (with what follows it) always stay, the fewest turns are dropped, and a conversation whose
// fixed part is too long is an error naming both counts.
#include "chat/conversation_fit.h"

#include <string>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

boost::json::object message(const char* role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// A stand-in renderer: one token per message plus one per character of its content; token ids
// spell the roles' first letters so the kept messages can be read back.
struct FakeRenderer {
  int calls = 0;
  Result<std::vector<int32_t>> operator()(const boost::json::array& messages) {
    ++calls;
    std::vector<int32_t> tokens;
    for (const boost::json::value& m : messages) {
      tokens.push_back(m.at("role").as_string()[0]);
      for (size_t i = 0; i < m.at("content").as_string().size(); ++i) tokens.push_back('.');
    }
    return tokens;
  }
};

std::string roles(const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) {
    if (t != '.') out.push_back(static_cast<char>(t));
  }
  return out;
}

boost::json::array conversation(int turns) {
  boost::json::array messages = {message("system", "be kind")};  // 8 tokens
  for (int i = 0; i < turns; ++i) {
    messages.push_back(message("user", "question"));      // 9 tokens
    messages.push_back(message("assistant", "answer!"));  // 8 tokens
  }
  messages.push_back(message("user", "last one"));  // 9 tokens
  return messages;
}

TEST(ConversationFitTest, AFittingConversationIsRenderedOnce) {
  FakeRenderer renderer;
  auto fitted = fit_conversation(conversation(3), 1000, renderer);
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ(renderer.calls, 1);
  EXPECT_EQ(fitted->dropped_messages, 0);
  EXPECT_EQ(fitted->dropped_tokens, 0);
  EXPECT_EQ(roles(fitted->prompt), "suauauau");
}

TEST(ConversationFitTest, DropsTheFewestOldestTurns) {
  // 8 + 10 turns x 17 + 9 = 187 tokens; 60 leave room for the system message, the last user
  // message and 2 turns (8 + 34 + 9 = 51; 3 turns would be 68).
  FakeRenderer renderer;
  auto fitted = fit_conversation(conversation(10), 60, renderer);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  EXPECT_EQ(roles(fitted->prompt), "suauau");
  EXPECT_EQ(fitted->prompt.size(), 51u);
  EXPECT_EQ(fitted->dropped_messages, 16);
  EXPECT_EQ(fitted->dropped_tokens, 187 - 51);
  EXPECT_LE(renderer.calls, 6);  // a binary search, not one render per turn
}

TEST(ConversationFitTest, WhatFollowsTheLastUserMessageStays) {
  boost::json::array messages = conversation(4);
  messages.push_back(message("assistant", "calling a tool"));
  messages.push_back(message("tool", "42"));
  FakeRenderer renderer;
  auto fitted = fit_conversation(messages, 60, renderer);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  // Kept: system, one turn, then user + assistant + tool (9 + 15 + 3).
  EXPECT_EQ(roles(fitted->prompt), "suauat");
}

TEST(ConversationFitTest, NoSystemMessage) {
  boost::json::array messages = conversation(5);
  messages.erase(messages.begin());
  FakeRenderer renderer;
  auto fitted = fit_conversation(messages, 30, renderer);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  EXPECT_EQ(roles(fitted->prompt), "uau");  // 17 + 9 = 26
  EXPECT_EQ(fitted->dropped_messages, 8);
}

TEST(ConversationFitTest, TooLongAloneIsAnErrorNamingBothCounts) {
  FakeRenderer renderer;
  auto fitted = fit_conversation(conversation(3), 16, renderer);
  ASSERT_FALSE(fitted.ok());
  EXPECT_EQ(fitted.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(fitted.status().message(),
            "the system messages and the last user turn alone take 17 tokens; at most 16 fit");
  // A single user message with nothing to drop.
  auto single =
      fit_conversation(boost::json::array{message("user", "a long question")}, 5, renderer);
  ASSERT_FALSE(single.ok());
  EXPECT_EQ(single.status().message(),
            "the system messages and the last user turn alone take 16 tokens; at most 5 fit");
}

TEST(ConversationFitTest, RendererErrorsComeBack) {
  int calls = 0;
  auto failing = [&](const boost::json::array& messages) -> Result<std::vector<int32_t>> {
    if (++calls > 1) return invalid_argument("template says no");
    return std::vector<int32_t>(messages.size() * 100, 1);
  };
  auto fitted = fit_conversation(conversation(3), 10, failing);
  ASSERT_FALSE(fitted.ok());
  EXPECT_EQ(fitted.status().message(), "template says no");
}

}  // namespace
}  // namespace tachyon
