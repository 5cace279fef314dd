// The prefix cache's disk tier: full KV blocks kept as files in a directory, so that a prefix
// evicted from RAM, or computed before a restart, is read back instead of recomputed.
//
// A block's file is named by SHA-256(key, block hash), where the key names everything the
// block's bytes depend on besides its tokens (the model file's fingerprint, the numerics, the
// cache type and layout) and the block hash chains the cache salt and every token up to the
// block's end (BlockHash). The file repeats the key, the block hash and the block's tokens,
// and a checksum (XXH3-64) covers all of it: a file that is truncated, corrupted, written for
// another model or renamed is never used; it is deleted, a warning is logged and the block is
// recomputed.
//
// Writes run on a background thread from copies the caller makes: each file is written under
// a temporary name and renamed into place, so a crash (even kill -9) mid-write leaves only a
// temporary file, which the next open deletes. The directory holds at most `max_bytes`
// (finished files plus the one being written); the least recently used files are deleted to
// make room (file modification times carry the order across restarts). One process uses a
// directory at a time (an advisory lock; a second one gets an error).
//
// Thread-safe: load() on the engine thread runs alongside the writer thread.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kv_cache/block_hash.h"

namespace tachyon {

struct KvDiskCounters {
  int64_t bytes = 0;                 // in the directory now (files and the one being written)
  int64_t files = 0;
  uint64_t blocks_loaded = 0;        // read back and used
  uint64_t bytes_read = 0;
  uint64_t blocks_written = 0;
  uint64_t bytes_written = 0;
  uint64_t files_evicted = 0;        // deleted to stay within max_bytes
  uint64_t files_rejected = 0;       // corrupt, truncated or foreign: deleted, recomputed
  uint64_t writes_dropped = 0;       // the writer was too far behind: block not written
  uint64_t write_errors = 0;         // the file system refused (full disk, permissions)
};

class KvDiskTier {
 public:
  using Key = std::array<uint8_t, 32>;

  // Opens (creating it if needed) `directory` for blocks of `block_size` tokens and
  // `block_bytes` bytes each, under `key`. Deletes temporary files left by a crash and, when
  // the directory is over `max_bytes`, the least recently used files. Fails when the
  // directory cannot be created or locked, or is used by another process.
  static Result<std::unique_ptr<KvDiskTier>> open(const std::string& directory, int64_t max_bytes,
                                                  const Key& key, int block_size,
                                                  size_t block_bytes);
  // Writes what is queued, then stops the writer.
  ~KvDiskTier();
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  // Whether a file for the block is in the directory (it may still turn out invalid on load).
  bool contains(const BlockHash& hash) const;
  // Whether store() would write the block: not on disk and not queued.
  bool wants(const BlockHash& hash) const;

  // Reads the block named `hash`, whose tokens are `tokens`, into `out` (its block_bytes, in
  // order). False when there is no such file or it is not valid for exactly this block (the
  // file is then deleted and a warning logged); `out` may have been written either way.
  bool load(const BlockHash& hash, std::span<const int32_t> tokens,
            std::span<const std::span<uint8_t>> out);

  // Queues the block for writing and returns at once. `payload` is its block_bytes. Dropped
  // (counted) when the queue already holds too many bytes.
  void store(const BlockHash& hash, std::span<const int32_t> tokens, std::vector<uint8_t> payload);

  // Waits until every queued block is written (tests, shutdown).
  void flush();

  KvDiskCounters counters() const;
  int64_t max_bytes() const { return max_bytes_; }
  const std::string& directory() const { return directory_; }

 private:
  // A file's name digest: SHA-256(key, block hash).
  using FileId = BlockHash;
  struct File {
    int64_t bytes = 0;
    std::list<FileId>::iterator lru_position;  // least recently used first
  };
  struct Job {
    BlockHash hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
  };

  KvDiskTier(std::string directory, int64_t max_bytes, const Key& key, int block_size,
             size_t block_bytes, int lock_fd);
  FileId file_id(const BlockHash& hash) const;
  std::string path_of(const FileId& id) const;
  // Scans the directory: deletes temporary files, indexes block files by modification time.
  void scan();
  void write_loop();
  void write(const Job& job);
  // Deletes least recently used files until `incoming` more bytes fit. Needs mutex_ held.
  void evict_for(int64_t incoming);
  // Drops a file from the index and the directory. Needs mutex_ held.
  void remove_locked(const FileId& id);
  // Deletes an invalid file and says why.
  void reject(const FileId& id, const std::string& why);
  int64_t file_bytes() const;

  const std::string directory_;
  const int64_t max_bytes_;
  const Key key_;
  const int block_size_;
  const size_t block_bytes_;
  const int lock_fd_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::unordered_map<FileId, File, BlockHashHasher> files_;
  std::list<FileId> lru_;
  std::deque<Job> queue_;
  std::unordered_set<BlockHash, BlockHashHasher> queued_;  // block hashes queued or being written
  int64_t queued_bytes_ = 0;
  int64_t writing_bytes_ = 0;  // the temporary file being written
  bool stopping_ = false;
  KvDiskCounters counters_;
  std::thread writer_;
};

}  // namespace tachyon
