#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const std::string kSmolLmDir = std::string(TACHYON_SHARED_DIR) + "/data/tokenizers/smollm-135m/";

// SmolLM's published tokenizer.json gives the vocabulary llama.cpp's converter put in the default
// model's GGUF file (itself checked against Hugging Face `tokenizers` on 6,778 strings by
// tokenizer_vs_hf_tokenizers), and the same token ids on the corpora.
TEST(HfVocabularyTest, SmolLmTokenizerJsonMatchesTheGgufVocabulary) {
  const std::string json = read_file(kSmolLmDir + "tokenizer.json");
  ASSERT_FALSE(json.empty()) << kSmolLmDir;
  const std::string config =
      R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},)"
      R"( "add_bos_token": false})";
  Result<Vocabulary> from_json = Vocabulary::from_hf_tokenizer(json, config);
  ASSERT_TRUE(from_json.ok()) << from_json.status().message();
  auto file = GgufFile::open(default_model_path());
  ASSERT_TRUE(file.ok()) << file.status().message() << " (run `make setup` to fetch it)";
  Result<Vocabulary> from_gguf = Vocabulary::from_gguf(**file);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().message();
  EXPECT_EQ(from_json->pre, "smollm");
  EXPECT_EQ(from_json->model, "gpt2");
  EXPECT_EQ(from_json->tokens, from_gguf->tokens);
  EXPECT_EQ(from_json->merges, from_gguf->merges);
  EXPECT_EQ(from_json->types, from_gguf->types);
  EXPECT_EQ(from_json->bos_id, from_json->find("<|im_start|>"));
  EXPECT_EQ(from_json->eos_id, from_json->find("<|im_end|>"));

  auto json_tokenizer = Tokenizer::from_vocabulary(std::move(*from_json));
  ASSERT_TRUE(json_tokenizer.ok()) << json_tokenizer.status().message();
  auto gguf_tokenizer = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(gguf_tokenizer.ok());
  int lines = 0;
  for (const char* corpus : {"/data/corpus/tinyshakespeare.txt", "/data/corpus/gpl-3.0.txt"}) {
    std::istringstream text(read_file(std::string(TACHYON_SHARED_DIR) + corpus));
    int corpus_lines = 0;  // the first 12,000 lines of each
    for (std::string line; std::getline(text, line) && corpus_lines < 12000; ++corpus_lines, ++lines) {
      ASSERT_EQ((*json_tokenizer)->encode(line), (*gguf_tokenizer)->encode(line)) << line;
    }
  }
  EXPECT_GT(lines, 12000);  // all of the second corpus too
  const std::string special = "<|im_start|>user\nHi 12345 <|im_end|>\n";
  EXPECT_EQ((*json_tokenizer)->encode(special), (*gguf_tokenizer)->encode(special));
}

// Other families' pre-tokenizers are recognised from their Split regexes and flags.
TEST(HfVocabularyTest, RecognisesPreTokenizerFamilies) {
  auto with = [](const std::string& pre_tokenizer, const std::string& extra) {
    return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]])" +
           extra + R"(}, "pre_tokenizer": )" + pre_tokenizer + "}";
  };
  const std::string llama3_split =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )"
      R"("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},)"
      R"( "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false,)"
      R"( "trim_offsets": true, "use_regex": false}]})";
  Result<Vocabulary> llama3 = Vocabulary::from_hf_tokenizer(with(llama3_split, R"(, "ignore_merges": true)"), std::nullopt);
  ASSERT_TRUE(llama3.ok()) << llama3.status().message();
  EXPECT_TRUE(llama3->pre == "llama-bpe" || llama3->pre == "llama3") << llama3->pre;
  EXPECT_EQ(llama3->merges, std::vector<std::string>{"a b"});

  Result<Vocabulary> gpt2 = Vocabulary::from_hf_tokenizer(
      with(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})", ""),
      std::nullopt);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().message();
  const std::string plain = gpt2->pre;
  EXPECT_TRUE(plain == "default" || plain == "gpt2" || plain == "gpt-2") << plain;

  // Without ignore_merges the Llama 3 regex is no known family.
  Result<Vocabulary> unknown = Vocabulary::from_hf_tokenizer(with(llama3_split, ""), std::nullopt);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("is none of the known families"), std::string::npos)
      << unknown.status().message();
}

TEST(HfVocabularyTest, RejectsBrokenTokenizerFilesWithAClearMessage) {
  struct BadCase {
    std::string json, message;
  };
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel", "use_regex": true})";
  const std::vector<BadCase> cases = {
      {"{oops", "tokenizer.json is not valid JSON"},
      {"[]", "tokenizer.json is not a JSON object"},
      {R"({"model": {"type": "Unigram"}})", "model type \"Unigram\" is not supported"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []},
           "normalizer": {"type": "NFC"}})",
       "SentencePiece-style BPE with normalizer {\"type\":\"NFC\"}"},
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}}})", "vocab \"a\" has id -1"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}}, )" + byte_level + "}",
       "no token with id 1 (of 3)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}})", "gives id 0 to both"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [3]}})",
       "merge 3 is not \"a b\" or [a, b]"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"id": 0, "content": "b"}]})",
       "added token 0 \"b\" clashes with vocab \"a\""},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Whitespace"}})",
       "pre-tokenizer {\"type\":\"Whitespace\"} is not supported"},
  };
  for (const BadCase& c : cases) {
    Result<Vocabulary> vocabulary = Vocabulary::from_hf_tokenizer(c.json, std::nullopt);
    ASSERT_FALSE(vocabulary.ok()) << c.json;
    EXPECT_NE(vocabulary.status().message().find(c.message), std::string::npos)
        << c.json << ": got \"" << vocabulary.status().message() << "\"";
  }
  Result<Vocabulary> bad_bos = Vocabulary::from_hf_tokenizer(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}}, )" + byte_level + "}",
      R"({"bos_token": "<s>"})");
  ASSERT_FALSE(bad_bos.ok());
  EXPECT_NE(bad_bos.status().message().find("bos_token \"<s>\" is not in the vocabulary"),
            std::string::npos)
      << bad_bos.status().message();
}

}  // namespace
}  // namespace tachyon
