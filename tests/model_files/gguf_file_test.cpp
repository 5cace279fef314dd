#include "model_files/gguf_file.h"

#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "core/paths.h"
#include "gguf_builder.h"

namespace tachyon {
namespace {

using testing::GgufBuilder;

std::string golden(const std::string& name) {
  return std::string(TACHYON_SOURCE_DIR) + "/tests/golden/gguf/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

boost::json::value to_json(const GgufValue& value) {
  if (const GgufArray* items = value.as_array()) {
    boost::json::array out;
    for (const GgufValue& item : *items) out.push_back(to_json(item));
    return out;
  }
  if (const std::string* text = value.as_string()) return boost::json::string(*text);
  if (std::optional<bool> b = value.as_bool()) return *b;
  if (value.is_float()) return *value.as_float();
  if (std::optional<int64_t> i = value.as_int()) return *i;
  return *value.as_uint();
}

std::vector<std::string> type_chain(const GgufValue& value) {
  std::vector<std::string> chain;
  const GgufValue* current = &value;
  while (true) {
    std::string name(gguf_value_type_name(current->type()));
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    chain.push_back(name);
    if (!current->is_array()) break;
    const GgufArray& items = *current->as_array();
    if (items.empty()) {
      std::string element(gguf_value_type_name(current->element_type()));
      for (char& c : element) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      chain.push_back(element);
      break;
    }
    current = &items[0];
  }
  return chain;
}

bool json_numbers_equal(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_double() || b.is_double()) return a.to_number<double>() == b.to_number<double>();
    if (a.is_uint64() || b.is_uint64()) {
      return a.to_number<uint64_t>() == b.to_number<uint64_t>();
    }
    return a.to_number<int64_t>() == b.to_number<int64_t>();
  }
  if (a.is_array() && b.is_array()) {
    const auto& x = a.get_array();
    const auto& y = b.get_array();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!json_numbers_equal(x[i], y[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Every fixture written by the PyPI gguf package reads back as gguf's own reader saw it.
class GgufFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFixtureTest, MatchesTheGgufPackage) {
  const std::string name = GetParam();
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(golden(name + ".gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const boost::json::object expected = boost::json::parse(read_text(golden(name + ".json"))).as_object();

  EXPECT_EQ((*file)->version(), expected.at("version").to_number<uint32_t>());
  EXPECT_EQ((*file)->alignment(), expected.at("alignment").to_number<uint64_t>());

  const boost::json::object& metadata = expected.at("metadata").as_object();
  size_t compared = 0;
  for (const auto& [key, description] : metadata) {
    const GgufValue* value = (*file)->find(key);
    ASSERT_NE(value, nullptr) << key;
    const boost::json::array& types = description.at("types").as_array();
    std::vector<std::string> want_types;
    for (const auto& t : types) want_types.emplace_back(t.as_string());
    EXPECT_EQ(type_chain(*value), want_types) << key;
    EXPECT_TRUE(json_numbers_equal(to_json(*value), description.at("value")))
        << key << ": got " << boost::json::serialize(to_json(*value)) << ", want "
        << boost::json::serialize(description.at("value"));
    ++compared;
  }
  // general.alignment is written only when set; every key the package saw must be ours too.
  EXPECT_EQ((*file)->metadata().size(), compared);

  const boost::json::array& tensors = expected.at("tensors").as_array();
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const auto& entry : tensors) {
    const boost::json::object& want = entry.as_object();
    const GgufTensorInfo* tensor = (*file)->find_tensor(std::string(want.at("name").as_string()));
    ASSERT_NE(tensor, nullptr) << want.at("name");
    EXPECT_EQ(dtype_name(tensor->type), want.at("type").as_string());
    std::vector<int64_t> shape;
    for (const auto& extent : want.at("shape").as_array()) shape.push_back(extent.to_number<int64_t>());
    EXPECT_EQ(tensor->shape, shape) << tensor->name;
    EXPECT_EQ(tensor->num_elements, want.at("num_elements").to_number<uint64_t>());
    EXPECT_EQ(tensor->num_bytes, want.at("num_bytes").to_number<uint64_t>());
    EXPECT_EQ((*file)->data_offset() + tensor->offset, want.at("file_offset").to_number<uint64_t>());
    const auto& first = want.at("first_bytes").as_array();
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(tensor->data[i], first[i].to_number<int>()) << tensor->name << " byte " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFixtureTest,
                         ::testing::Values("fixture_v3", "fixture_v3_align64", "fixture_v2"));

// Every truncation of a valid file is rejected with a message, never a crash or a read past
// the end (ASan would see one).
TEST(GgufFileTest, EveryTruncationIsAnError) {
  const std::string bytes = read_text(golden("fixture_v3.gguf"));
  Result<std::unique_ptr<GgufFile>> whole =
      GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  uint64_t end_of_last_tensor = 0;
  for (const GgufTensorInfo& tensor : (*whole)->tensors()) {
    end_of_last_tensor = std::max(end_of_last_tensor,
                                  (*whole)->data_offset() + tensor.offset + tensor.num_bytes);
  }
  for (size_t size = 0; size < end_of_last_tensor; ++size) {
    // A fresh copy of exactly `size` bytes, so ASan catches any read past it.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + size);
    Result<std::unique_ptr<GgufFile>> file = GgufFile::parse(prefix.data(), prefix.size());
    ASSERT_FALSE(file.ok()) << "a " << size << "-byte prefix parsed";
    EXPECT_FALSE(file.status().message().empty());
  }
}

// Every single-byte corruption of the header and metadata either parses or fails cleanly.
TEST(GgufFileTest, EveryByteFlipIsHandled) {
  const std::string bytes = read_text(golden("fixture_v3.gguf"));
  Result<std::unique_ptr<GgufFile>> whole =
      GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(whole.ok());
  for (size_t at = 0; at < (*whole)->data_offset(); ++at) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x7f}}) {
      std::vector<uint8_t> corrupt(bytes.begin(), bytes.end());
      corrupt[at] = value;
      Result<std::unique_ptr<GgufFile>> file = GgufFile::parse(corrupt.data(), corrupt.size());
      if (!file.ok()) {
        EXPECT_FALSE(file.status().message().empty());
      }
    }
  }
}

Status parse_status(const GgufBuilder& builder) {
  Result<std::unique_ptr<GgufFile>> file =
      GgufFile::parse(builder.bytes.data(), builder.bytes.size(), "test.gguf");
  return file.ok() ? Status() : file.status();
}

TEST(GgufFileTest, MissingFileNamesThePath) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open("/no/such/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(file.status().message(), "cannot open /no/such/model.gguf: No such file or directory");
}

TEST(GgufFileTest, DirectoryIsNotAModel) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open("/tmp");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(), "/tmp is not a regular file");
}

TEST(GgufFileTest, BadMagic) {
  GgufBuilder b;
  b.raw("GGML", 4).u32(3).u64(0).u64(0);
  EXPECT_EQ(parse_status(b).message(),
            "test.gguf: not a GGUF file: magic is 0x4c4d4747, expected 0x46554747 (\"GGUF\")");
}

TEST(GgufFileTest, TooShort) {
  GgufBuilder b;
  b.raw("GG", 2);
  EXPECT_EQ(parse_status(b).message(), "test.gguf: file is 2 bytes, too short to be GGUF");
}

TEST(GgufFileTest, UnsupportedVersions) {
  GgufBuilder v1;
  v1.header(1, 0, 0);
  EXPECT_EQ(parse_status(v1).message(),
            "test.gguf: GGUF version 1 is not supported (supported: 2, 3)");
  GgufBuilder big_endian;
  big_endian.header(0x03000000, 0, 0);
  EXPECT_EQ(parse_status(big_endian).message(),
            "test.gguf: big-endian GGUF files are not supported");
}

TEST(GgufFileTest, EmptyFileWithoutTensorsIsValid) {
  GgufBuilder b;
  b.header(3, 0, 1).kv_string("general.architecture", "llama");
  Result<std::unique_ptr<GgufFile>> file = GgufFile::parse(b.bytes.data(), b.bytes.size());
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ((*file)->get_string("general.architecture"), "llama");
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(GgufFileTest, HugeCountsAreRejectedBeforeAllocating) {
  GgufBuilder kv;
  kv.header(3, 0, uint64_t{1} << 62);
  EXPECT_EQ(parse_status(kv).message(),
            "test.gguf: metadata kv_count is 4611686018427387904 but only 0 bytes remain (each "
            "pair needs at least 13)");

  GgufBuilder tensors;
  tensors.header(3, uint64_t{1} << 60, 0);
  EXPECT_EQ(parse_status(tensors).message(),
            "test.gguf: tensor_count is 1152921504606846976 but only 0 bytes remain (each tensor "
            "info needs at least 24)");

  GgufBuilder array;
  array.header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(uint64_t{1} << 61);
  EXPECT_EQ(parse_status(array).message(),
            "test.gguf: metadata 'tokenizer.ggml.tokens': array of 2305843009213693952 string "
            "elements (at least 8 bytes each) runs past the end of the file (0 bytes remain)");

  GgufBuilder string;
  string.header(3, 0, 1).str("general.name").u32(8).u64(1000).raw("abc", 3);
  EXPECT_EQ(parse_status(string).message(),
            "test.gguf: general.name: string length 1000 at offset 48 runs past the end of the "
            "file (3 bytes left)");
}

TEST(GgufFileTest, ArraysOfArraysAndTheirLimits) {
  GgufBuilder nested;
  nested.header(3, 0, 1).str("x.nested").u32(9).u32(9).u64(2);
  nested.u32(4).u64(2).u32(10).u32(20);  // [10, 20]
  nested.u32(4).u64(0);                  // []
  Result<std::unique_ptr<GgufFile>> file =
      GgufFile::parse(nested.bytes.data(), nested.bytes.size());
  ASSERT_TRUE(file.ok()) << file.status().message();
  const GgufArray& outer = *(*file)->find("x.nested")->as_array();
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(*outer[0].as_array()->at(1).as_uint(), 20u);
  EXPECT_TRUE(outer[1].as_array()->empty());

  GgufBuilder deep;
  deep.header(3, 0, 1).str("x.deep").u32(9);
  for (int level = 0; level < 9; ++level) deep.u32(9).u64(1);
  deep.zeros(64);
  EXPECT_EQ(parse_status(deep).message(),
            "test.gguf: metadata 'x.deep': arrays nested deeper than 8 levels");
}

TEST(GgufFileTest, BadValuesNameTheKey) {
  GgufBuilder bool_value;
  bool_value.header(3, 0, 1).str("x.flag").u32(7).u8(2);
  EXPECT_EQ(parse_status(bool_value).message(),
            "test.gguf: metadata 'x.flag': bool value is 2 at offset 42, expected 0 or 1");

  GgufBuilder type;
  type.header(3, 0, 1).str("x.value").u32(13).u32(0);
  EXPECT_EQ(parse_status(type).message(),
            "test.gguf: metadata 'x.value': value type is 13 at offset 39, valid types are 0..12");

  GgufBuilder duplicate;
  duplicate.header(3, 0, 2).kv_u32("x.a", 1).kv_u32("x.a", 2);
  EXPECT_EQ(parse_status(duplicate).message(), "test.gguf: metadata key 'x.a' appears twice");

  GgufBuilder alignment;
  alignment.header(3, 0, 1).kv_u32("general.alignment", 24);
  EXPECT_EQ(parse_status(alignment).message(),
            "test.gguf: general.alignment is 24 (uint32), expected a uint32 power of two");
}

TEST(GgufFileTest, BadTensorInfosNameTheTensor) {
  auto one_tensor = [](std::vector<uint64_t> shape, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    GgufBuilder b;
    b.header(3, 1, 0).tensor_info("w", std::move(shape), type, offset).pad_to(32).zeros(data_bytes);
    return parse_status(b).message();
  };
  EXPECT_EQ(one_tensor({1, 1, 1, 1, 1}, 0, 0, 4),
            "test.gguf: tensor 'w': 5 dimensions, expected 1..4");
  EXPECT_EQ(one_tensor({4}, 99, 0, 16), "test.gguf: tensor 'w': unknown tensor type id 99");
  EXPECT_EQ(one_tensor({33, 2}, 8, 0, 1000),
            "test.gguf: tensor 'w': row length 33 is not a multiple of the Q8_0 block size 32");
  EXPECT_EQ(one_tensor({4}, 0, 8, 64),
            "test.gguf: tensor 'w': offset 8 is not a multiple of the alignment 32");
  EXPECT_EQ(one_tensor({64}, 0, 0, 100),
            "test.gguf: tensor 'w': 256 bytes at data offset 0 run past the end of the file (the "
            "data section holds 100 bytes of the file's 164; truncated?)");
  EXPECT_EQ(one_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 4),
            "test.gguf: tensor 'w': dimension 1 is 1099511627776, the element count overflows");

  GgufBuilder overlap;
  overlap.header(3, 2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {16}, 0, 32);
  overlap.pad_to(32).zeros(128);
  EXPECT_EQ(parse_status(overlap).message(),
            "test.gguf: tensors 'a' (bytes 0..64) and 'b' (from 32) overlap");

  GgufBuilder duplicate;
  duplicate.header(3, 2, 0).tensor_info("a", {8}, 0, 0).tensor_info("a", {8}, 0, 32);
  duplicate.pad_to(32).zeros(64);
  EXPECT_EQ(parse_status(duplicate).message(), "test.gguf: tensor name 'a' appears twice");
}

// The default model installed by scripts/setup.sh.
TEST(GgufFileTest, DefaultModel) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(default_model_path());
  ASSERT_TRUE(file.ok()) << file.status().message() << " (run `make setup` to fetch it)";
  EXPECT_EQ((*file)->version(), 3u);
  EXPECT_EQ((*file)->get_string("general.architecture"), "llama");
  EXPECT_EQ((*file)->tensors().size(), 272u);
  EXPECT_EQ((*file)->get_uint("llama.block_count"), 30u);
  const GgufTensorInfo* embedding = (*file)->find_tensor("token_embd.weight");
  ASSERT_NE(embedding, nullptr);
  EXPECT_EQ(embedding->type, DType::kQ8_0);
  EXPECT_EQ(embedding->shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ((*file)->find("tokenizer.ggml.tokens")->as_array()->size(), 49152u);
}

}  // namespace
}  // namespace tachyon
