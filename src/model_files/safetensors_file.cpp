#include "model_files/safetensors_file.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace tachyon {
namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  int bytes;
};
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {SafetensorsDType::kBool, "BOOL", 1},     {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},         {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1}, {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},       {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},     {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},       {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kI64, "I64", 8},       {SafetensorsDType::kU64, "U64", 8},
    {SafetensorsDType::kF64, "F64", 8},
}};

const DTypeInfo& info_of(SafetensorsDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  return kDTypes[0];  // unreachable: every enumerator is listed
}

// Thrown inside the parser only; parse() turns it into a Status.
struct ParseError {
  Status status;
};

[[noreturn]] void fail(std::string message) { throw ParseError{corrupt_data(std::move(message))}; }

// A JSON value as the header shows it (truncated), for messages.
std::string shown(const boost::json::value& value) {
  std::string text = boost::json::serialize(value);
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  return text;
}

// A non-negative integer that fits int64 (JSON numbers may come as int64, uint64 or double).
std::optional<uint64_t> as_count(const boost::json::value& value) {
  if (value.is_int64()) {
    return value.get_int64() >= 0 ? std::optional<uint64_t>(value.get_int64()) : std::nullopt;
  }
  if (value.is_uint64()) {
    return value.get_uint64() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::optional<uint64_t>(value.get_uint64())
               : std::nullopt;
  }
  return std::nullopt;
}

SafetensorsTensor parse_tensor(const std::string& name, const boost::json::value& entry) {
  if (!entry.is_object()) {
    fail(fmt::format("tensor '{}': its header entry is {}, not an object", name, shown(entry)));
  }
  const boost::json::object& fields = entry.get_object();
  for (std::string_view key : {"dtype", "shape", "data_offsets"}) {
    if (!fields.contains(key)) fail(fmt::format("tensor '{}': no \"{}\" in its entry", name, key));
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  const boost::json::value& dtype = fields.at("dtype");
  const DTypeInfo* info = nullptr;
  if (dtype.is_string()) {
    for (const DTypeInfo& candidate : kDTypes) {
      if (candidate.name == std::string_view(dtype.get_string())) info = &candidate;
    }
  }
  if (info == nullptr) {
    fail(fmt::format("tensor '{}': unknown dtype {} (known: BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, "
                     "U16, F16, BF16, I32, U32, F32, I64, U64, F64)",
                     name, shown(dtype)));
  }
  tensor.dtype = info->dtype;
  const boost::json::value& shape = fields.at("shape");
  if (!shape.is_array()) fail(fmt::format("tensor '{}': shape {} is not an array", name, shown(shape)));
  uint64_t elements = 1;
  for (const boost::json::value& dimension : shape.get_array()) {
    const std::optional<uint64_t> size = as_count(dimension);
    if (!size) {
      fail(fmt::format("tensor '{}': shape {} has {}, not a size", name, shown(shape),
                       shown(dimension)));
    }
    if (*size != 0 && elements > std::numeric_limits<uint64_t>::max() / 8 / *size) {
      fail(fmt::format("tensor '{}': shape {} has more elements than any file can hold", name,
                       shown(shape)));
    }
    elements *= *size;
    tensor.shape.push_back(static_cast<int64_t>(*size));
  }
  tensor.num_elements = elements;
  const boost::json::value& offsets = fields.at("data_offsets");
  std::optional<uint64_t> begin;
  std::optional<uint64_t> end;
  if (offsets.is_array() && offsets.get_array().size() == 2) {
    begin = as_count(offsets.get_array()[0]);
    end = as_count(offsets.get_array()[1]);
  }
  if (!begin || !end || *begin > *end) {
    fail(fmt::format("tensor '{}': data_offsets {} is not [begin, end] with begin <= end", name,
                     shown(offsets)));
  }
  tensor.begin = *begin;
  tensor.end = *end;
  const uint64_t bytes = elements * static_cast<uint64_t>(info->bytes);
  if (*end - *begin != bytes) {
    fail(fmt::format("tensor '{}': {} of shape {} takes {} bytes but data_offsets {} span {}",
                     name, info->name, shown(shape), bytes, shown(offsets), *end - *begin));
  }
  return tensor;
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDType dtype) { return info_of(dtype).name; }

int safetensors_dtype_bytes(SafetensorsDType dtype) { return info_of(dtype).bytes; }

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping.ok()) return mapping.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->bytes_ = (*mapping)->data();
  file->size_ = (*mapping)->size();
  file->mapping_ = std::move(*mapping);
  Status status = file->parse_all();
  if (!status.ok()) return Status(status.code(), path + ": " + status.message());
  return file;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* bytes, size_t size,
                                                                std::string display_name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(display_name);
  file->bytes_ = bytes;
  file->size_ = size;
  Status status = file->parse_all();
  if (!status.ok()) return Status(status.code(), file->path_ + ": " + status.message());
  return file;
}

Status SafetensorsFile::parse_all() {
  try {
    if (size_ < 8) fail(fmt::format("file is {} bytes, too short to be safetensors", size_));
    uint64_t header_bytes;
    std::memcpy(&header_bytes, bytes_, sizeof(header_bytes));  // little-endian, as x86
    if (header_bytes > size_ - 8) {
      fail(fmt::format("header length {} runs past the end of the file ({} bytes; truncated, or "
                       "not safetensors?)",
                       header_bytes, size_));
    }
    if (header_bytes > kMaxHeaderBytes) {
      fail(fmt::format("header length {} is over the format's limit of {} bytes", header_bytes,
                       kMaxHeaderBytes));
    }
    data_offset_ = 8 + header_bytes;
    const std::string_view header(reinterpret_cast<const char*>(bytes_ + 8), header_bytes);
    if (header.empty() || header.front() != '{') {
      fail("the header is not a JSON object (it must start with '{'; not safetensors?)");
    }
    boost::json::error_code error;
    boost::json::parse_options options;
    options.max_depth = 8;  // {tensor: {shape: [...]}}: anything deeper is not a header
    const boost::json::value root = boost::json::parse(header, error, {}, options);
    if (error) fail(fmt::format("the header is not valid JSON: {}", error.message()));
    if (!root.is_object()) fail("the header is not a JSON object");
    for (const auto& [key, value] : root.get_object()) {
      const std::string name(key);
      if (name == "__metadata__") {
        if (!value.is_object()) {
          fail(fmt::format("__metadata__ is {}, not an object of strings", shown(value)));
        }
        for (const auto& [meta_key, meta_value] : value.get_object()) {
          if (!meta_value.is_string()) {
            fail(fmt::format("__metadata__ \"{}\" is {}, not a string", std::string(meta_key),
                             shown(meta_value)));
          }
          metadata_.emplace(std::string(meta_key), std::string(meta_value.get_string()));
        }
        continue;
      }
      tensors_.push_back(parse_tensor(name, value));
    }
    // In data order; together the tensors must cover the data section exactly: no overlap, no
    // unindexed bytes (the format forbids holes, which would also hide bytes from validation).
    std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const uint64_t data_size = size_ - data_offset_;
    uint64_t covered = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const SafetensorsTensor& tensor : tensors_) {
      if (tensor.begin < covered) {
        fail(fmt::format("tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap",
                         previous->name, previous->begin, previous->end, tensor.name, tensor.begin,
                         tensor.end));
      }
      if (tensor.begin > covered) {
        fail(fmt::format("data bytes {}..{} belong to no tensor (before '{}'); the format allows "
                         "no holes",
                         covered, tensor.begin, tensor.name));
      }
      if (tensor.end > data_size) {
        fail(fmt::format("tensor '{}': data_offsets [{}, {}] run past the end of the data section "
                         "({} bytes after the {}-byte header; truncated?)",
                         tensor.name, tensor.begin, tensor.end, data_size, header_bytes));
      }
      covered = tensor.end;
      previous = &tensor;
    }
    if (covered != data_size) {
      fail(fmt::format("data bytes {}..{} at the end belong to no tensor; the format allows no "
                       "holes",
                       covered, data_size));
    }
    // Names are unique: the JSON parser keeps the last of repeated keys, and the bytes of an
    // earlier one are then an unindexed hole, reported above.
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].data = bytes_ + data_offset_ + tensors_[i].begin;
      tensor_index_.emplace(tensors_[i].name, i);
    }
  } catch (const ParseError& error) {
    return error.status;
  }
  return Status();
}

const SafetensorsTensor* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tachyon
