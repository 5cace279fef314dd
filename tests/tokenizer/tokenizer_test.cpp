#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "core/paths.h"
#include "tokenizer/streaming_detokenizer.h"

namespace tachyon {
namespace {

class DefaultModelTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(default_model_path());
    ASSERT_TRUE(file.ok()) << file.status().message() << " (run `make setup` to fetch it)";
    Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    tokenizer_ = std::move(*tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static Tokenizer* tokenizer_;
};
Tokenizer* DefaultModelTokenizer::tokenizer_ = nullptr;

// Expected ids come from Hugging Face tokenizers with the SmolLM tokenizer.json.
TEST_F(DefaultModelTokenizer, MatchesHuggingFaceOnASentence) {
  const std::string text = "Hello world! <|im_start|>user 12345 don't";
  EXPECT_EQ(tokenizer_->encode(text),
            (std::vector<TokenId>{19556, 905, 17, 216, 1, 4093, 216, 33, 34, 35, 36, 37, 1326, 982}));
  EXPECT_EQ(tokenizer_->encode(text, {.parse_special = false}),
            (std::vector<TokenId>{19556, 905, 17, 2067, 108, 306, 79, 3738, 108, 46, 4093, 216, 33,
                                  34, 35, 36, 37, 1326, 982}));
}

TEST_F(DefaultModelTokenizer, BytesWithoutATokenAreDroppedAsHuggingFaceDoes) {
  // SmolLM's vocabulary has no token for byte 0x04; HF's BPE (no unk token) drops it.
  EXPECT_EQ(tokenizer_->encode("a\x04" "b"), (std::vector<TokenId>{81, 82}));
}

TEST_F(DefaultModelTokenizer, AddSpecialFollowsTheVocabulary) {
  // SmolLM2 declares add_bos_token = false: nothing is added.
  EXPECT_EQ(tokenizer_->encode("Hi", {.add_special = true}), tokenizer_->encode("Hi"));
}

TEST_F(DefaultModelTokenizer, RoundTripsText) {
  for (const std::string text :
       {"", " ", "Hello, world!", "  leading and trailing  ", "你好，世界 🙂 e\xcc\x81",
        "<|im_start|>system\nYou are helpful<|im_end|>\n", "\t\t\n\n\r\n  x  "}) {
    Result<std::string> decoded = tokenizer_->decode(tokenizer_->encode(text));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
  }
}

TEST_F(DefaultModelTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const std::vector<TokenId> ids = {1, 49152};
  Result<std::string> decoded = tokenizer_->decode(ids);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "token id 49152 is outside the vocabulary (0..49151)");
}

TEST_F(DefaultModelTokenizer, SkipSpecialLeavesControlTokensOut) {
  const std::vector<TokenId> ids = tokenizer_->encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(*tokenizer_->decode(ids, /*skip_special=*/true), "user\nHi");
}

// Streaming never emits a broken UTF-8 sequence, and the pieces add up to the whole text.
TEST_F(DefaultModelTokenizer, StreamingDetokenizerEmitsOnlyWholeCharacters) {
  const std::string text = "Emoji 👨‍👩‍👧 and 你好 and \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!";
  const std::vector<TokenId> ids = tokenizer_->encode(text);
  StreamingDetokenizer detokenizer(*tokenizer_);
  std::string joined;
  int held_back = 0;
  for (TokenId id : ids) {
    Result<std::string> piece = detokenizer.push(id);
    ASSERT_TRUE(piece.ok());
    std::string check = *piece;
    std::string valid;
    take_complete_utf8(check, valid, /*final=*/true);
    EXPECT_EQ(valid, *piece) << "piece for token " << id << " is not whole UTF-8";
    if (piece->empty()) ++held_back;
    joined += *piece;
  }
  joined += detokenizer.finish();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held_back, 0) << "the test text should split characters across tokens";
}

TEST(StreamingUtf8Test, HoldsBackUnfinishedAndReplacesInvalid) {
  std::string bytes = "ab\xe4\xbd";  // "你" is e4 bd a0: unfinished
  std::string out;
  take_complete_utf8(bytes, out, false);
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(bytes, "\xe4\xbd");
  bytes += "\xa0!";
  take_complete_utf8(bytes, out, false);
  EXPECT_EQ(out, "ab你!");
  EXPECT_TRUE(bytes.empty());

  // Bad lead, overlong, surrogate: each byte is its own maximal subpart.
  std::string invalid = "\xff" "a\xc0\xaf" "b\xed\xa0\x80";
  std::string replaced;
  take_complete_utf8(invalid, replaced, false);
  EXPECT_EQ(replaced, "\xef\xbf\xbd" "a\xef\xbf\xbd\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");

  // A valid start cut short by another character is one U+FFFD, as Python decodes it.
  std::string cut_short = "\xe1\xb8" "a\xf0\x9f\x91" "b";
  std::string one_each;
  take_complete_utf8(cut_short, one_each, false);
  EXPECT_EQ(one_each, "\xef\xbf\xbd" "a\xef\xbf\xbd" "b");

  std::string cut = "x\xf0\x9f\x91";
  std::string final_out;
  take_complete_utf8(cut, final_out, true);
  EXPECT_EQ(final_out, "x\xef\xbf\xbd");
}

Vocabulary small_vocabulary(std::string model, std::string pre) {
  Vocabulary vocabulary;
  vocabulary.model = std::move(model);
  vocabulary.pre = std::move(pre);
  vocabulary.tokens = {"a"};
  vocabulary.types = {TokenType::kNormal};
  vocabulary.scores = {0.0f};
  vocabulary.token_to_id = {{"a", 0}};
  return vocabulary;
}

TEST(TokenizerErrorsTest, UnknownTokenizerType) {
  Result<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::from_vocabulary(small_vocabulary("rwkv", ""));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().message(),
            "tokenizer type 'rwkv' (tokenizer.ggml.model) is not supported; supported: gpt2 "
            "(byte-level BPE), llama (SentencePiece)");
}

TEST(TokenizerErrorsTest, UnknownPreTokenizer) {
  Result<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::from_vocabulary(small_vocabulary("gpt2", "no-such-pre"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().message(),
            "unknown pre-tokenizer 'no-such-pre' (tokenizer.ggml.pre); known: deepseek-v3, "
            "default, gpt-2, gpt2, kimi-k2, llama-bpe, llama3, qwen2, smollm");
}

// A hand-made SentencePiece vocabulary: merges follow scores, unknown characters fall back to
// byte tokens, and decoding drops the added leading space.
TEST(SentencePieceTest, MergesByScoreWithByteFallback) {
  Vocabulary vocabulary;
  vocabulary.model = "llama";
  vocabulary.add_space_prefix = true;
  auto add = [&](const std::string& text, float score, TokenType type) {
    vocabulary.token_to_id.emplace(text, static_cast<TokenId>(vocabulary.tokens.size()));
    vocabulary.tokens.push_back(text);
    vocabulary.scores.push_back(score);
    vocabulary.types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);  // 0
  add("<s>", 0, TokenType::kControl);    // 1
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    add(name, 0, TokenType::kByte);  // 2 + byte
  }
  add("\xe2\x96\x81", -1, TokenType::kNormal);             // 258 "▁"
  add("h", -2, TokenType::kNormal);                        // 259
  add("i", -2, TokenType::kNormal);                        // 260
  add("hi", -5, TokenType::kNormal);                       // 261
  add("\xe2\x96\x81h", -3, TokenType::kNormal);            // 262 "▁h"
  add("\xe2\x96\x81hi", -4, TokenType::kNormal);           // 263 "▁hi"
  vocabulary.unknown_id = 0;
  vocabulary.bos_id = 1;
  vocabulary.add_bos = true;
  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_vocabulary(vocabulary);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();

  // "▁h" (-3) outranks "hi" (-5), then "▁h"+"i" -> "▁hi".
  EXPECT_EQ((*tokenizer)->encode("hi"), (std::vector<TokenId>{263}));
  // "é" is not a token: its two UTF-8 bytes fall back to <0xC3> <0xA9>.
  EXPECT_EQ((*tokenizer)->encode("hi \xc3\xa9", {.add_special = true}),
            (std::vector<TokenId>{1, 263, 258, 2 + 0xc3, 2 + 0xa9}));
  // After a special token the text again gets its "▁" prefix.
  EXPECT_EQ((*tokenizer)->encode("<s>hi"), (std::vector<TokenId>{1, 263}));
  EXPECT_EQ(*(*tokenizer)->decode(std::vector<TokenId>{263, 258, 2 + 0xc3, 2 + 0xa9}),
            "hi \xc3\xa9");

  StreamingDetokenizer detokenizer(**tokenizer);
  EXPECT_EQ(*detokenizer.push(263), "hi");
  EXPECT_EQ(*detokenizer.push(258), " ");
  EXPECT_EQ(*detokenizer.push(2 + 0xc3), "");  // half a character waits
  EXPECT_EQ(*detokenizer.push(2 + 0xa9), "\xc3\xa9");
  EXPECT_EQ(detokenizer.finish(), "");
}

}  // namespace
}  // namespace tachyon
