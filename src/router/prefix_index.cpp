#include "router/prefix_index.h"

#include <algorithm>

namespace tachyon::router {
namespace {

// FNV-1a over the chunk, seeded with the previous key, then a SplitMix64 finaliser so that
// nearby chains spread over the table.
uint64_t chain_hash(uint64_t previous, std::string_view chunk) {
  uint64_t hash = 0xcbf29ce484222325ULL ^ previous;
  for (unsigned char c : chunk) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  hash += 0x9e3779b97f4a7c15ULL;
  hash = (hash ^ (hash >> 30)) * 0xbf58476d1ce4e5b9ULL;
  hash = (hash ^ (hash >> 27)) * 0x94d049bb133111ebULL;
  return hash ^ (hash >> 31);
}

}  // namespace

PrefixIndex::PrefixIndex(size_t chunk_bytes, size_t capacity)
    : chunk_bytes_(std::max<size_t>(1, chunk_bytes)), capacity_(std::max<size_t>(1, capacity)) {}

std::vector<uint64_t> PrefixIndex::prefix_keys(std::string_view text) const {
  std::vector<uint64_t> keys;
  keys.reserve(text.size() / chunk_bytes_);
  uint64_t key = 0;
  for (size_t start = 0; start + chunk_bytes_ <= text.size(); start += chunk_bytes_) {
    key = chain_hash(key, text.substr(start, chunk_bytes_));
    keys.push_back(key);
  }
  return keys;
}

std::optional<PrefixIndex::Match> PrefixIndex::longest_match(
    const std::vector<uint64_t>& keys, FunctionRef<bool(int)> usable) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = keys.size(); i > 0; --i) {
    auto it = entries_.find(keys[i - 1]);
    if (it != entries_.end() && usable(it->second.replica)) return Match{it->second.replica, i};
  }
  return std::nullopt;
}

void PrefixIndex::record(const std::vector<uint64_t>& keys, int replica) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint64_t key : keys) {
    auto [it, inserted] = entries_.try_emplace(key, Entry{replica, {}});
    if (!inserted) {
      it->second.replica = replica;
      recency_.erase(it->second.age);
    }
    recency_.push_front(key);
    it->second.age = recency_.begin();
  }
  while (entries_.size() > capacity_) {
    entries_.erase(recency_.back());
    recency_.pop_back();
  }
}

size_t PrefixIndex::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace tachyon::router
