#include "model_files/safetensors_file.h"

#include <openssl/evp.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace tachyon {
namespace {

std::string golden(const std::string& name) {
  return std::string(TACHYON_SOURCE_DIR) + "/tests/golden/safetensors/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string sha256_hex(const uint8_t* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EXPECT_EQ(1, EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr));
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    static const char kDigits[] = "0123456789abcdef";
    hex += kDigits[digest[i] >> 4];
    hex += kDigits[digest[i] & 15];
  }
  return hex;
}

// What the PyPI safetensors package wrote (tools/make_safetensors_fixtures.py) and read back
// with its own deserializer: every dtype, a scalar, an empty tensor, the metadata.
TEST(SafetensorsFileTest, ReadsWhatTheReferenceWrote) {
  auto file = SafetensorsFile::open(golden("fixture.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const boost::json::object expected =
      boost::json::parse(read_text(golden("fixture.json"))).as_object();
  const boost::json::array& tensors = expected.at("tensors").as_array();
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const boost::json::value& entry : tensors) {
    const boost::json::object& want = entry.as_object();
    const std::string name(want.at("name").as_string());
    const SafetensorsTensor* tensor = (*file)->find_tensor(name);
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_EQ(safetensors_dtype_name(tensor->dtype), std::string_view(want.at("dtype").as_string()))
        << name;
    std::vector<int64_t> shape;
    for (const boost::json::value& size : want.at("shape").as_array()) {
      shape.push_back(size.to_number<int64_t>());
    }
    EXPECT_EQ(tensor->shape, shape) << name;
    EXPECT_EQ(tensor->end - tensor->begin, want.at("num_bytes").to_number<uint64_t>()) << name;
    EXPECT_EQ(tensor->num_elements * safetensors_dtype_bytes(tensor->dtype),
              tensor->end - tensor->begin)
        << name;
    EXPECT_EQ(sha256_hex(tensor->data, tensor->end - tensor->begin),
              std::string_view(want.at("sha256").as_string()))
        << name;
  }
  // In data order, covering the data section.
  uint64_t covered = 0;
  for (const SafetensorsTensor& tensor : (*file)->tensors()) {
    EXPECT_EQ(tensor.begin, covered) << tensor.name;
    covered = tensor.end;
  }
  EXPECT_EQ((*file)->data_offset() + covered, (*file)->file_size());
  std::map<std::string, std::string, std::less<>> metadata;
  for (const auto& [key, value] : expected.at("metadata").as_object()) {
    metadata.emplace(std::string(key), std::string(value.as_string()));
  }
  EXPECT_EQ((*file)->metadata(), metadata);
  EXPECT_EQ((*file)->find_tensor("missing"), nullptr);
}

// A safetensors file from a header text and `data_bytes` bytes of data.
std::string make_file(const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, sizeof(length));
  return bytes + header + std::string(data_bytes, '\x01');
}

Status parse_status(const std::string& bytes) {
  auto file = SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                     "bad.safetensors");
  return file.ok() ? Status() : file.status();
}

TEST(SafetensorsFileTest, ParsesAHandMadeFile) {
  const std::string bytes = make_file(
      R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[8,20]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("z":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[20,20]}})",
      20);
  auto file = SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->tensors()[0].name, "a");
  EXPECT_EQ((*file)->tensors()[1].name, "b");
  EXPECT_EQ((*file)->find_tensor("b")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*file)->find_tensor("b")->data,
            reinterpret_cast<const uint8_t*>(bytes.data()) + (*file)->data_offset() + 8);
  EXPECT_TRUE((*file)->metadata().empty());
}

// Each hostile or broken file gets a corrupt-data Status whose message names what is wrong.
TEST(SafetensorsFileTest, RejectsBrokenFilesWithAClearMessage) {
  const std::string f32 = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct BadCase {
    std::string what;
    std::string bytes;
    std::string message;  // a part of the expected message
  };
  std::string huge_length(8, '\0');
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(huge_length.data(), &huge, 8);
  std::string deep = "{\"w\":";
  for (int i = 0; i < 20; ++i) deep += "[";
  for (int i = 0; i < 20; ++i) deep += "]";
  deep += "}";  // well-formed, only too deep
  const std::vector<BadCase> cases = {
      {"too short", "abc", "too short to be safetensors"},
      {"header length past the end", huge_length + "{}", "header length 4611686018427387904"},
      {"truncated data", make_file(f32, 7), "run past the end of the data section"},
      {"extra bytes", make_file(f32, 9), "data bytes 8..9 at the end belong to no tensor"},
      {"not JSON", make_file("{\"w\": nope}", 0), "not valid JSON"},
      {"not an object", make_file("[1,2]", 0), "not a JSON object"},
      {"too deep", make_file(deep, 0), "not valid JSON"},
      {"unknown dtype",
       make_file(R"({"w":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'w': unknown dtype \"F7\""},
      {"missing field", make_file(R"({"w":{"dtype":"F32","shape":[2]}})", 8),
       "tensor 'w': no \"data_offsets\""},
      {"entry not an object", make_file(R"({"w":3})", 0), "tensor 'w': its header entry is 3"},
      {"negative size",
       make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "tensor 'w': shape [-2] has -2, not a size"},
      {"fractional size",
       make_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       "not a size"},
      {"shape overflows",
       make_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                 8),
       "more elements than any file can hold"},
      {"size disagrees with shape",
       make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "tensor 'w': F32 of shape [3] takes 12 bytes but data_offsets [0,8] span 8"},
      {"offsets reversed",
       make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       "not [begin, end] with begin <= end"},
      {"offsets not a pair",
       make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
       "data_offsets [0] is not [begin, end]"},
      {"overlap",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 12),
       "tensors 'a' (bytes 0..8) and 'b' (bytes 4..12) overlap"},
      {"hole",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                 12),
       "data bytes 4..8 belong to no tensor (before 'b')"},
      {"name repeated (the JSON keeps the last)",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 8),
       "data bytes 0..4 belong to no tensor (before 'a')"},
      {"metadata not strings", make_file(R"({"__metadata__":{"n":1}})", 0),
       "__metadata__ \"n\" is 1, not a string"},
      {"metadata not an object", make_file(R"({"__metadata__":"x"})", 0),
       "__metadata__ is \"x\", not an object"},
  };
  for (const BadCase& c : cases) {
    const Status status = parse_status(c.bytes);
    EXPECT_EQ(status.code(), StatusCode::kCorruptData) << c.what << ": " << status.message();
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.what << ": got \"" << status.message() << "\"";
    EXPECT_EQ(status.message().rfind("bad.safetensors: ", 0), 0u) << c.what;
  }
}

TEST(SafetensorsFileTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::open(golden("no-such.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tachyon
