// A safetensors file (Hugging Face's weight format), memory-mapped and fully validated on open:
// an 8-byte little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and
// byte range [begin, end) in the data that follows, then the data. Every length, shape and
// offset is checked before use (sizes against shapes and dtypes, ranges against the file, no
// overlaps and no unindexed holes, as the format requires), so a hostile file gets a Status
// naming the tensor and the values, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model_files/mapped_file.h"

namespace tachyon {

// The element types the format defines (its header spells them as in the comments).
enum class SafetensorsDType {
  kBool,     // "BOOL"
  kU8,       // "U8"
  kI8,       // "I8"
  kF8E4M3,   // "F8_E4M3" (DeepSeek-V3 / Kimi-K2 weights, with per-block scales)
  kF8E5M2,   // "F8_E5M2"
  kI16,      // "I16"
  kU16,      // "U16"
  kF16,      // "F16"
  kBF16,     // "BF16"
  kI32,      // "I32"
  kU32,      // "U32"
  kF32,      // "F32"
  kI64,      // "I64"
  kU64,      // "U64"
  kF64,      // "F64"
};
std::string_view safetensors_dtype_name(SafetensorsDType dtype);
int safetensors_dtype_bytes(SafetensorsDType dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // row-major: shape.back() is the contiguous dimension
  uint64_t begin = 0;          // byte range [begin, end) in the data section
  uint64_t end = 0;
  uint64_t num_elements = 0;
  const uint8_t* data = nullptr;  // points into the mapping (or the caller's bytes)
};

class SafetensorsFile {
 public:
  // Largest JSON header accepted (the format's reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and parses `path`; any inconsistency is a Status naming the tensor and values.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses bytes already in memory (tests and the fuzzer); `bytes` must outlive the file.
  static Result<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* bytes, size_t size,
                                                        std::string display_name = "<memory>");

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + the header length

  // Tensors in the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find_tensor(std::string_view name) const;
  // The header's optional "__metadata__" (string to string), sorted by key.
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status parse_all();

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null when parsing caller-owned bytes
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

}  // namespace tachyon
