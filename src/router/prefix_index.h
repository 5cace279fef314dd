// PrefixIndex: which replica last served each prompt prefix, so that a conversation (or a
// shared system prompt) goes back to the replica whose prefix cache holds it.
//
// A prompt is cut into chunks of `chunk_bytes` bytes of its text; chunk i's key hashes chunks
// 0..i (a chain, as the engine's KV blocks are hashed), so a key names a whole prefix. Only
// whole chunks get keys. The table holds at most `capacity` keys; the least recently used go.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/function_ref.h"

namespace tachyon::router {

class PrefixIndex {
 public:
  PrefixIndex(size_t chunk_bytes, size_t capacity);

  // The chained keys of `text`'s whole chunks, shortest prefix first.
  std::vector<uint64_t> prefix_keys(std::string_view text) const;

  // The longest prefix in `keys` whose replica is `usable`: (replica, number of chunks).
  struct Match {
    int replica = -1;
    size_t chunks = 0;
  };
  std::optional<Match> longest_match(const std::vector<uint64_t>& keys,
                                     FunctionRef<bool(int)> usable) const;
  // `replica` now holds every prefix in `keys`.
  void record(const std::vector<uint64_t>& keys, int replica);

  size_t size() const;
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Entry {
    int replica;
    std::list<uint64_t>::iterator age;  // position in recency_ (front = newest)
  };
  const size_t chunk_bytes_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> recency_;
};

}  // namespace tachyon::router
