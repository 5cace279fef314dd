#include "models/shard_call.h"

#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace tachyon {
namespace {

class Writer {
 public:
  template <typename T>
  void value(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <typename T>
  void vector(const std::vector<T>& v) {
    value<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T value() {
    T v;
    TACHYON_CHECK(offset_ + sizeof(T) <= bytes_.size());
    std::memcpy(&v, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return v;
  }
  template <typename T>
  void vector(std::vector<T>& v) {
    const auto size = value<uint64_t>();
    TACHYON_CHECK(size <= (bytes_.size() - offset_) / sizeof(T));
    v.resize(size);
    // (An empty vector's data() may be null, which memcpy must not get even for 0 bytes.)
    if (size > 0) std::memcpy(v.data(), bytes_.data() + offset_, size * sizeof(T));
    offset_ += size * sizeof(T);
  }
  bool done() const { return offset_ == bytes_.size(); }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t offset_ = 0;
};

// Broadcast first: what follows and how many bytes.
struct CallHeader {
  uint64_t kind = 0;
  uint64_t bytes = 0;
};

// Followers poll the leader's next call at most this far apart once idle.
constexpr int kIdlePollMicros = 2000;

}  // namespace

std::vector<uint8_t> ShardCall::encode() const {
  Writer out;
  out.value(cache_id);
  out.value(static_cast<int32_t>(cache_type));
  for (int v :
       {capacity, num_local_blocks, start_position, num_logits, position_offset, expert_spare}) {
    out.value<int32_t>(v);
  }
  out.vector(tokens);
  out.value<int32_t>(batch.block_size);
  out.vector(batch.block_copies);
  out.vector(batch.key_shifts);
  out.vector(batch.tokens);
  out.vector(batch.positions);
  out.vector(batch.slots);
  out.vector(batch.local_slots);
  out.vector(batch.logits_tokens);
  out.value<uint64_t>(batch.sequences.size());
  for (const BatchSequence& sequence : batch.sequences) {
    out.value<int32_t>(sequence.first_token);
    out.value<int32_t>(sequence.num_tokens);
    out.value<int32_t>(sequence.start_position);
    out.vector(sequence.block_table);
    out.vector(sequence.local_block_table);
  }
  return std::move(out.bytes);
}

ShardCall ShardCall::decode(const std::vector<uint8_t>& bytes) {
  Reader in(bytes);
  ShardCall call;
  call.cache_id = in.value<uint64_t>();
  call.cache_type = static_cast<DType>(in.value<int32_t>());
  for (int* v : {&call.capacity, &call.num_local_blocks, &call.start_position, &call.num_logits,
                 &call.position_offset, &call.expert_spare}) {
    *v = in.value<int32_t>();
  }
  in.vector(call.tokens);
  call.batch.block_size = in.value<int32_t>();
  in.vector(call.batch.block_copies);
  in.vector(call.batch.key_shifts);
  in.vector(call.batch.tokens);
  in.vector(call.batch.positions);
  in.vector(call.batch.slots);
  in.vector(call.batch.local_slots);
  in.vector(call.batch.logits_tokens);
  call.batch.sequences.resize(in.value<uint64_t>());
  for (BatchSequence& sequence : call.batch.sequences) {
    sequence.first_token = in.value<int32_t>();
    sequence.num_tokens = in.value<int32_t>();
    sequence.start_position = in.value<int32_t>();
    in.vector(sequence.block_table);
    in.vector(sequence.local_block_table);
  }
  TACHYON_CHECK(in.done());
  return call;
}

void send_shard_call(dist::Communicator& world, const ShardCall& call) {
  std::vector<uint8_t> bytes;
  if (call.kind != ShardCall::Kind::kStop) bytes = call.encode();
  CallHeader header{static_cast<uint64_t>(call.kind), bytes.size()};
  // The followers wait with a non-blocking broadcast, which only a non-blocking one matches.
  world.broadcast_idle(&header, sizeof(header), 0, kIdlePollMicros);
  if (!bytes.empty()) world.broadcast(bytes.data(), bytes.size(), 0);
}

ShardCall receive_shard_call(dist::Communicator& world) {
  CallHeader header;
  world.broadcast_idle(&header, sizeof(header), 0, kIdlePollMicros);
  if (header.kind == static_cast<uint64_t>(ShardCall::Kind::kStop)) return ShardCall{};
  std::vector<uint8_t> bytes(header.bytes);
  world.broadcast(bytes.data(), bytes.size(), 0);
  ShardCall call = ShardCall::decode(bytes);
  call.kind = static_cast<ShardCall::Kind>(header.kind);
  return call;
}

}  // namespace tachyon
