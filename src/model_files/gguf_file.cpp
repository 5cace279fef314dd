#include "model_files/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace tachyon {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint32_t kMaxDims = 4;              // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayNesting = 8;           // deeper nesting is hostile, not a model
constexpr uint64_t kMaxKeyBytes = 65535;
// Every materialised metadata element costs ~50 bytes of RAM; real files hold ~1M.
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 24;

// Thrown inside the parser only; GgufFile::parse turns it into a Status.
struct ParseError {
  Status status;
};

[[noreturn]] void fail(std::string message) { throw ParseError{corrupt_data(std::move(message))}; }

// Reads little-endian values from [bytes, bytes + size), never past the end.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, uint64_t size) : bytes_(bytes), size_(size) {}

  uint64_t position() const { return position_; }
  uint64_t remaining() const { return size_ - position_; }

  template <typename T>
  T read(std::string_view what) {
    require(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_ + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const uint64_t length = read<uint64_t>(what);
    if (length > remaining()) {
      fail(fmt::format("{}: string length {} at offset {} runs past the end of the file ({} "
                       "bytes left)",
                       what, length, position_ - 8, remaining()));
    }
    std::string text(reinterpret_cast<const char*>(bytes_ + position_), length);
    position_ += length;
    return text;
  }

  void require(uint64_t count, std::string_view what) const {
    if (count > remaining()) {
      fail(fmt::format("{}: needs {} bytes at offset {} but the file ends at {} (truncated?)",
                       what, count, position_, size_));
    }
  }

 private:
  const uint8_t* bytes_;
  uint64_t size_;
  uint64_t position_ = 0;
};

// Smallest number of bytes one element of `type` can take in the file.
uint64_t min_encoded_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;  // a string is at least its length field
    case GgufValueType::kArray: return 12;  // element type + count
  }
  return 1;
}

class MetadataParser {
 public:
  explicit MetadataParser(Cursor& cursor) : cursor_(cursor) {}

  GgufValue read_value(GgufValueType type, const std::string& key, int depth) {
    switch (type) {
      case GgufValueType::kUint8: return {type, uint64_t{cursor_.read<uint8_t>(key)}};
      case GgufValueType::kInt8: return {type, int64_t{cursor_.read<int8_t>(key)}};
      case GgufValueType::kUint16: return {type, uint64_t{cursor_.read<uint16_t>(key)}};
      case GgufValueType::kInt16: return {type, int64_t{cursor_.read<int16_t>(key)}};
      case GgufValueType::kUint32: return {type, uint64_t{cursor_.read<uint32_t>(key)}};
      case GgufValueType::kInt32: return {type, int64_t{cursor_.read<int32_t>(key)}};
      case GgufValueType::kUint64: return {type, cursor_.read<uint64_t>(key)};
      case GgufValueType::kInt64: return {type, cursor_.read<int64_t>(key)};
      case GgufValueType::kFloat32: return {type, double{cursor_.read<float>(key)}};
      case GgufValueType::kFloat64: return {type, cursor_.read<double>(key)};
      case GgufValueType::kBool: {
        const uint8_t byte = cursor_.read<uint8_t>(key);
        if (byte > 1) {
          fail(fmt::format("metadata '{}': bool value is {} at offset {}, expected 0 or 1", key,
                           byte, cursor_.position() - 1));
        }
        return GgufValue(byte == 1);
      }
      case GgufValueType::kString: return GgufValue(cursor_.read_string(key));
      case GgufValueType::kArray: return read_array(key, depth);
    }
    fail(fmt::format("metadata '{}': unknown value type {}", key, static_cast<uint32_t>(type)));
  }

  GgufValueType read_type(const std::string& key, std::string_view what) {
    const uint64_t at = cursor_.position();
    const uint32_t raw = cursor_.read<uint32_t>(key);
    if (raw > static_cast<uint32_t>(GgufValueType::kFloat64)) {
      fail(fmt::format("metadata '{}': {} is {} at offset {}, valid types are 0..12", key, what,
                       raw, at));
    }
    return static_cast<GgufValueType>(raw);
  }

 private:
  GgufValue read_array(const std::string& key, int depth) {
    if (depth >= kMaxArrayNesting) {
      fail(fmt::format("metadata '{}': arrays nested deeper than {} levels", key,
                       kMaxArrayNesting));
    }
    const GgufValueType element_type = read_type(key, "array element type");
    const uint64_t count = cursor_.read<uint64_t>(key);
    const uint64_t min_bytes = min_encoded_size(element_type);
    if (count > cursor_.remaining() / min_bytes) {
      fail(fmt::format("metadata '{}': array of {} {} elements (at least {} bytes each) runs past "
                       "the end of the file ({} bytes remain)",
                       key, count, gguf_value_type_name(element_type), min_bytes,
                       cursor_.remaining()));
    }
    total_elements_ += count;
    if (total_elements_ > kMaxMetadataElements) {
      fail(fmt::format("metadata '{}': arrays hold {} elements in total, more than the limit of {}",
                       key, total_elements_, kMaxMetadataElements));
    }
    GgufArray items;
    items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      items.push_back(read_value(element_type, key, depth + 1));
    }
    return GgufValue(element_type, std::move(items));
  }

  Cursor& cursor_;
  uint64_t total_elements_ = 0;
};

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::open(path));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->bytes_ = mapping->data();
  file->size_ = mapping->size();
  file->mapping_ = std::move(mapping);
  Status status = file->parse_all();
  if (!status.ok()) return Status(status.code(), path + ": " + status.message());
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* bytes, size_t size,
                                                  std::string display_name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(display_name);
  file->bytes_ = bytes;
  file->size_ = size;
  Status status = file->parse_all();
  if (!status.ok()) return Status(status.code(), file->path_ + ": " + status.message());
  return file;
}

Status GgufFile::parse_all() {
  try {
    Cursor cursor(bytes_, size_);
    if (size_ < 4) fail(fmt::format("file is {} bytes, too short to be GGUF", size_));
    const uint32_t magic = cursor.read<uint32_t>("magic");
    if (magic != kGgufMagic) {
      fail(fmt::format("not a GGUF file: magic is 0x{:08x}, expected 0x{:08x} (\"GGUF\")", magic,
                       kGgufMagic));
    }
    version_ = cursor.read<uint32_t>("version");
    if (version_ == 0x02000000u || version_ == 0x03000000u) {
      return unsupported("big-endian GGUF files are not supported");
    }
    if (version_ != 2 && version_ != 3) {
      return unsupported(fmt::format("GGUF version {} is not supported (supported: 2, 3)",
                                     version_));
    }
    const uint64_t tensor_count = cursor.read<uint64_t>("tensor_count");
    const uint64_t kv_count = cursor.read<uint64_t>("metadata kv_count");
    // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes.
    if (kv_count > cursor.remaining() / 13) {
      fail(fmt::format("metadata kv_count is {} but only {} bytes remain (each pair needs at "
                       "least 13)",
                       kv_count, cursor.remaining()));
    }
    MetadataParser metadata_parser(cursor);
    for (uint64_t i = 0; i < kv_count; ++i) {
      std::string key = cursor.read_string(fmt::format("metadata key #{}", i));
      if (key.empty() || key.size() > kMaxKeyBytes) {
        fail(fmt::format("metadata key #{} has length {}, expected 1..{}", i, key.size(),
                         kMaxKeyBytes));
      }
      if (metadata_index_.count(key)) fail(fmt::format("metadata key '{}' appears twice", key));
      const GgufValueType type = metadata_parser.read_type(key, "value type");
      GgufValue value = metadata_parser.read_value(type, key, 0);
      metadata_index_.emplace(key, metadata_.size());
      metadata_.emplace_back(std::move(key), std::move(value));
    }

    if (const GgufValue* alignment = find("general.alignment")) {
      const std::optional<uint64_t> value = alignment->as_uint();
      if (alignment->type() != GgufValueType::kUint32 || !value || *value == 0 ||
          (*value & (*value - 1)) != 0) {
        fail(fmt::format("general.alignment is {} ({}), expected a uint32 power of two",
                         alignment->to_display_string(), gguf_value_type_name(alignment->type())));
      }
      alignment_ = *value;
    }

    // A tensor info takes at least 8 (name length) + 4 (dims) + 4 (type) + 8 (offset) bytes.
    if (tensor_count > cursor.remaining() / 24) {
      fail(fmt::format("tensor_count is {} but only {} bytes remain (each tensor info needs at "
                       "least 24)",
                       tensor_count, cursor.remaining()));
    }
    tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
      GgufTensorInfo tensor;
      tensor.name = cursor.read_string(fmt::format("tensor #{} name", i));
      const std::string& name = tensor.name;
      if (tensor_index_.count(name)) fail(fmt::format("tensor name '{}' appears twice", name));
      const uint32_t num_dims = cursor.read<uint32_t>(name);
      if (num_dims == 0 || num_dims > kMaxDims) {
        fail(fmt::format("tensor '{}': {} dimensions, expected 1..{}", name, num_dims, kMaxDims));
      }
      uint64_t num_elements = 1;
      for (uint32_t d = 0; d < num_dims; ++d) {
        const uint64_t extent = cursor.read<uint64_t>(name);
        if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            (extent != 0 && num_elements > std::numeric_limits<uint64_t>::max() / extent)) {
          fail(fmt::format("tensor '{}': dimension {} is {}, the element count overflows", name,
                           d, extent));
        }
        num_elements *= extent;
        tensor.shape.push_back(static_cast<int64_t>(extent));
      }
      const uint32_t type_id = cursor.read<uint32_t>(name);
      const std::optional<DTypeInfo> info = dtype_info(type_id);
      if (!info) fail(fmt::format("tensor '{}': unknown tensor type id {}", name, type_id));
      tensor.type = info->type;
      if (tensor.shape[0] % info->block_elements != 0) {
        fail(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}",
                         name, tensor.shape[0], info->name, info->block_elements));
      }
      tensor.num_elements = num_elements;
      const uint64_t num_blocks = num_elements / info->block_elements;
      if (num_blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
        fail(fmt::format("tensor '{}': {} elements of {} overflow a 64-bit byte count", name,
                         num_elements, info->name));
      }
      tensor.num_bytes = num_blocks * info->block_bytes;
      tensor.offset = cursor.read<uint64_t>(name);
      if (tensor.offset % alignment_ != 0) {
        fail(fmt::format("tensor '{}': offset {} is not a multiple of the alignment {}", name,
                         tensor.offset, alignment_));
      }
      tensor_index_.emplace(name, tensors_.size());
      tensors_.push_back(std::move(tensor));
    }

    data_offset_ = align_up(cursor.position(), alignment_);
    if (!tensors_.empty() && data_offset_ > size_) {
      fail(fmt::format("tensor data section starts at offset {} but the file has {} bytes",
                       data_offset_, size_));
    }
    const uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
    for (GgufTensorInfo& tensor : tensors_) {
      if (tensor.offset > data_size || tensor.num_bytes > data_size - tensor.offset) {
        fail(fmt::format("tensor '{}': {} bytes at data offset {} run past the end of the "
                         "file (the data section holds {} bytes of the file's {}; truncated?)",
                         tensor.name, tensor.num_bytes, tensor.offset, data_size, size_));
      }
      tensor.data = bytes_ + data_offset_ + tensor.offset;
    }
    // Tensors must not overlap: each one's bytes belong to it alone.
    std::vector<const GgufTensorInfo*> by_offset;
    for (const GgufTensorInfo& tensor : tensors_) by_offset.push_back(&tensor);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const auto* a, const auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo& previous = *by_offset[i - 1];
      if (previous.offset + previous.num_bytes > by_offset[i]->offset) {
        fail(fmt::format("tensors '{}' (bytes {}..{}) and '{}' (from {}) overlap", previous.name,
                         previous.offset, previous.offset + previous.num_bytes,
                         by_offset[i]->name, by_offset[i]->offset));
      }
    }
  } catch (const ParseError& error) {
    return error.status;
  }
  return Status();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value || !value->as_string()) return std::nullopt;
  return *value->as_string();
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_uint() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_bool() : std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tachyon
