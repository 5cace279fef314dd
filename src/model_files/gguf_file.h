// A GGUF model file (versions 2 and 3), memory-mapped and fully validated on open: every
// count, length, offset and size is checked against the file before it is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model_files/gguf_value.h"
#include "model_files/mapped_file.h"

namespace tachyon {

struct GgufTensorInfo {
  std::string name;
  DType type;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  uint64_t offset = 0;         // from the start of the tensor data section
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
};

class GgufFile {
 public:
  // Maps and parses `path`; any inconsistency is a Status naming the field and values.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes already in memory (used by tests and the fuzzer); `bytes` must outlive the file.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* bytes, size_t size,
                                                 std::string display_name = "<memory>");

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  // The file's bytes (tensor data pointers point into them), and whether they are a mapping of
  // path() (open) rather than caller-owned memory (parse).
  const uint8_t* bytes() const { return bytes_; }
  bool mapped() const { return mapping_ != nullptr; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status parse_all();

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null when parsing caller-owned bytes
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace tachyon
