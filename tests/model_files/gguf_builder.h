// Builds GGUF bytes by hand, including malformed ones, for reader tests and fuzz seeds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tachyon::testing {

class GgufBuilder {
 public:
  std::vector<uint8_t> bytes;

  GgufBuilder& u8(uint8_t v) { return raw(&v, 1); }
  GgufBuilder& u32(uint32_t v) { return raw(&v, 4); }
  GgufBuilder& u64(uint64_t v) { return raw(&v, 8); }
  GgufBuilder& i32(int32_t v) { return raw(&v, 4); }
  GgufBuilder& f32(float v) { return raw(&v, 4); }
  GgufBuilder& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBuilder& header(uint32_t version, uint64_t tensor_count, uint64_t kv_count) {
    raw("GGUF", 4);
    u32(version);
    u64(tensor_count);
    return u64(kv_count);
  }
  // key + uint32 value (type 4)
  GgufBuilder& kv_u32(const std::string& key, uint32_t value) {
    str(key);
    u32(4);
    return u32(value);
  }
  GgufBuilder& kv_string(const std::string& key, const std::string& value) {
    str(key);
    u32(8);
    return str(value);
  }
  GgufBuilder& tensor_info(const std::string& name, std::vector<uint64_t> shape, uint32_t type,
                           uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(shape.size()));
    for (uint64_t extent : shape) u64(extent);
    u32(type);
    return u64(offset);
  }
  GgufBuilder& pad_to(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
    return *this;
  }
  GgufBuilder& zeros(size_t count) {
    bytes.insert(bytes.end(), count, 0);
    return *this;
  }
  GgufBuilder& raw(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
    return *this;
  }
};

}  // namespace tachyon::testing
