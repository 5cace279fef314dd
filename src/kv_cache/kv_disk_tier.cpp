#include "kv_cache/kv_disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "core/check.h"
#include "core/sha256.h"

namespace tachyon {
namespace {

constexpr char kMagic[8] = {'T', 'K', 'V', 'B', 'L', 'K', '0', '1'};
constexpr std::string_view kBlockSuffix = ".kvb";
constexpr std::string_view kTemporarySuffix = ".tmp";
// Bytes of copies the writer may be behind by; more blocks are dropped rather than queued.
constexpr int64_t kMaxQueuedBytes = int64_t{256} << 20;

// The start of every block file (little-endian, as the hosts we run on), then the tokens
// (int32 [num_tokens]) and the payload (the block's bytes, layer 0 first; with a local pool the
// global layers', then the local layers': runtime/DiskPrefixStore).
struct FileHeader {
  char magic[8];
  uint32_t header_bytes;
  uint32_t num_tokens;
  uint64_t payload_bytes;
  uint8_t key[32];
  uint8_t block_hash[32];
  uint64_t checksum;  // XXH3-64 of this header (checksum 0), the tokens and the payload
  uint8_t reserved[32];
};
static_assert(sizeof(FileHeader) == 128);

std::string hex(std::span<const uint8_t> bytes) {
  std::string text;
  text.reserve(bytes.size() * 2);
  for (uint8_t byte : bytes) text += fmt::format("{:02x}", byte);
  return text;
}

bool parse_hex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != out.size() * 2) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    int value = 0;
    for (char c : text.substr(i * 2, 2)) {
      value <<= 4;
      if (c >= '0' && c <= '9') value |= c - '0';
      else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
      else return false;
    }
    out[i] = static_cast<uint8_t>(value);
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

// Reads exactly `count` bytes at `offset` unless the file ends first; false on error or EOF.
bool read_fully(int fd, void* out, size_t count, off_t offset) {
  auto* bytes = static_cast<uint8_t*>(out);
  while (count > 0) {
    const ssize_t n = pread(fd, bytes, count, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    count -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

bool write_fully(int fd, const void* data, size_t count) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (count > 0) {
    const ssize_t n = ::write(fd, bytes, count);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    count -= static_cast<size_t>(n);
  }
  return true;
}

// The checksum a file stores: over its header (checksum zeroed), tokens and payload parts.
uint64_t file_checksum(FileHeader header, std::span<const int32_t> tokens,
                       std::span<const std::span<uint8_t>> payload) {
  header.checksum = 0;
  XXH3_state_t* state = XXH3_createState();
  TACHYON_CHECK(state != nullptr);
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, &header, sizeof(header));
  XXH3_64bits_update(state, tokens.data(), tokens.size_bytes());
  for (std::span<uint8_t> part : payload) XXH3_64bits_update(state, part.data(), part.size());
  const uint64_t checksum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return checksum;
}

}  // namespace

Result<std::unique_ptr<KvDiskTier>> KvDiskTier::open(const std::string& directory,
                                                     int64_t max_bytes, const Key& key,
                                                     int block_size, size_t block_bytes) {
  if (directory.empty()) return invalid_argument("the KV disk directory is empty");
  if (max_bytes <= 0) {
    return invalid_argument(fmt::format("KV disk size {} is not positive", max_bytes));
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return io_error(
        fmt::format("cannot create the KV disk directory {}: {}", directory, error.message()));
  }
  const std::string lock_path = directory + "/lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return io_error(fmt::format("cannot open {}: {}", lock_path, errno_text()));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    ::close(lock_fd);
    if (lock_errno == EWOULDBLOCK) {
      return unavailable(fmt::format(
          "the KV disk directory {} is in use by another process; give each server its own",
          directory));
    }
    return io_error(fmt::format("cannot lock {}: {}", lock_path, std::strerror(lock_errno)));
  }
  std::unique_ptr<KvDiskTier> tier(
      new KvDiskTier(directory, max_bytes, key, block_size, block_bytes, lock_fd));
  tier->scan();
  tier->writer_ = std::thread([raw = tier.get()] { raw->write_loop(); });
  return tier;
}

KvDiskTier::KvDiskTier(std::string directory, int64_t max_bytes, const Key& key, int block_size,
                       size_t block_bytes, int lock_fd)
    : directory_(std::move(directory)),
      max_bytes_(max_bytes),
      key_(key),
      block_size_(block_size),
      block_bytes_(block_bytes),
      lock_fd_(lock_fd) {}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (writer_.joinable()) writer_.join();
  ::close(lock_fd_);  // releases the lock
}

KvDiskTier::FileId KvDiskTier::file_id(const BlockHash& hash) const {
  return {sha256({std::span<const uint8_t>(key_), std::span<const uint8_t>(hash.bytes)})};
}

std::string KvDiskTier::path_of(const FileId& id) const {
  return fmt::format("{}/{}{}", directory_, hex(id.bytes), kBlockSuffix);
}

void KvDiskTier::scan() {
  struct Found {
    int64_t mtime_ns;
    FileId id;
    int64_t bytes;
  };
  std::vector<Found> found;
  DIR* dir = opendir(directory_.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    const std::string path = directory_ + "/" + std::string(name);
    if (name.ends_with(kTemporarySuffix)) {
      ::unlink(path.c_str());  // a write that never finished
      continue;
    }
    FileId id;
    if (!name.ends_with(kBlockSuffix) ||
        !parse_hex(name.substr(0, name.size() - kBlockSuffix.size()), id.bytes)) {
      continue;
    }
    struct stat info;
    if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    found.push_back({int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec, id,
                     info.st_size});
  }
  closedir(dir);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime_ns, a.id.bytes) < std::tie(b.mtime_ns, b.id.bytes);
  });
  std::lock_guard lock(mutex_);
  for (const Found& file : found) {
    lru_.push_back(file.id);
    files_[file.id] = {file.bytes, std::prev(lru_.end())};
    counters_.bytes += file.bytes;
  }
  evict_for(0);
}

bool KvDiskTier::contains(const BlockHash& hash) const {
  const FileId id = file_id(hash);
  std::lock_guard lock(mutex_);
  return files_.contains(id);
}

bool KvDiskTier::wants(const BlockHash& hash) const {
  const FileId id = file_id(hash);
  std::lock_guard lock(mutex_);
  return !files_.contains(id) && !queued_.contains(hash);
}

bool KvDiskTier::load(const BlockHash& hash, std::span<const int32_t> tokens,
                      std::span<const std::span<uint8_t>> out) {
  const FileId id = file_id(hash);
  {
    std::lock_guard lock(mutex_);
    if (!files_.contains(id)) return false;
  }
  const std::string path = path_of(id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {  // deleted behind our back (or by the writer's eviction just now)
    std::lock_guard lock(mutex_);
    if (files_.contains(id)) remove_locked(id);
    return false;
  }
  const size_t token_bytes = tokens.size_bytes();
  const size_t expected = sizeof(FileHeader) + token_bytes + block_bytes_;
  size_t out_bytes = 0;
  for (std::span<uint8_t> part : out) out_bytes += part.size();
  TACHYON_CHECK(out_bytes == block_bytes_ && static_cast<int>(tokens.size()) == block_size_);

  // Checks in order of cost; the first failure names the problem.
  std::string problem;
  struct stat info;
  FileHeader header;
  std::vector<int32_t> stored_tokens(tokens.size());
  if (fstat(fd, &info) != 0) {
    problem = "cannot stat: " + errno_text();
  } else if (static_cast<size_t>(info.st_size) != expected) {
    problem = fmt::format("{} bytes, a block file has {} (truncated or not a block)",
                          info.st_size, expected);
  } else if (!read_fully(fd, &header, sizeof(header), 0)) {
    problem = "cannot read its header";
  } else if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 ||
             header.header_bytes != sizeof(FileHeader)) {
    problem = "not a tachyon KV block file";
  } else if (std::memcmp(header.key, key_.data(), key_.size()) != 0) {
    problem = "written for another model, numerics or cache layout";
  } else if (std::memcmp(header.block_hash, hash.bytes.data(), hash.bytes.size()) != 0 ||
             header.num_tokens != tokens.size() || header.payload_bytes != block_bytes_) {
    problem = "holds another block";
  } else if (!read_fully(fd, stored_tokens.data(), token_bytes, sizeof(header))) {
    problem = "cannot read its tokens";
  } else if (!std::equal(stored_tokens.begin(), stored_tokens.end(), tokens.begin())) {
    problem = "its tokens differ from the prompt's";
  } else {
    off_t offset = static_cast<off_t>(sizeof(header) + token_bytes);
    for (std::span<uint8_t> part : out) {
      if (!read_fully(fd, part.data(), part.size(), offset)) {
        problem = "cannot read its payload";
        break;
      }
      offset += static_cast<off_t>(part.size());
    }
    if (problem.empty() && file_checksum(header, tokens, out) != header.checksum) {
      problem = "checksum mismatch (corrupted)";
    }
  }
  if (problem.empty()) futimens(fd, nullptr);  // most recently used, also after a restart
  ::close(fd);
  if (!problem.empty()) {
    reject(id, problem);
    return false;
  }
  std::lock_guard lock(mutex_);
  auto file = files_.find(id);
  if (file != files_.end()) lru_.splice(lru_.end(), lru_, file->second.lru_position);
  ++counters_.blocks_loaded;
  counters_.bytes_read += expected;
  return true;
}

void KvDiskTier::store(const BlockHash& hash, std::span<const int32_t> tokens,
                       std::vector<uint8_t> payload) {
  TACHYON_CHECK(payload.size() == block_bytes_ && static_cast<int>(tokens.size()) == block_size_);
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queued_.contains(hash)) return;
    if (queued_bytes_ + static_cast<int64_t>(payload.size()) > kMaxQueuedBytes) {
      ++counters_.writes_dropped;
      return;
    }
    queued_.insert(hash);
    queued_bytes_ += static_cast<int64_t>(payload.size());
    queue_.push_back({hash, std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(payload)});
  }
  work_ready_.notify_one();
}

void KvDiskTier::flush() {
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return queued_.empty(); });
}

KvDiskCounters KvDiskTier::counters() const {
  std::lock_guard lock(mutex_);
  KvDiskCounters counters = counters_;
  counters.bytes = file_bytes();
  counters.files = static_cast<int64_t>(files_.size());
  return counters;
}

int64_t KvDiskTier::file_bytes() const { return counters_.bytes + writing_bytes_; }

void KvDiskTier::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, everything written
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    write(job);
    lock.lock();
    queued_.erase(job.hash);
    queued_bytes_ -= static_cast<int64_t>(job.payload.size());
    if (queued_.empty()) work_done_.notify_all();
  }
}

void KvDiskTier::write(const Job& job) {
  const FileId id = file_id(job.hash);
  const int64_t bytes =
      static_cast<int64_t>(sizeof(FileHeader) + job.tokens.size() * sizeof(int32_t) +
                           job.payload.size());
  {
    std::lock_guard lock(mutex_);
    if (files_.contains(id)) return;
    if (bytes > max_bytes_) {
      ++counters_.writes_dropped;
      return;
    }
    evict_for(bytes);
    writing_bytes_ = bytes;
  }
  FileHeader header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.header_bytes = sizeof(FileHeader);
  header.num_tokens = static_cast<uint32_t>(job.tokens.size());
  header.payload_bytes = job.payload.size();
  std::memcpy(header.key, key_.data(), key_.size());
  std::memcpy(header.block_hash, job.hash.bytes.data(), job.hash.bytes.size());
  std::span<uint8_t> payload(const_cast<uint8_t*>(job.payload.data()), job.payload.size());
  header.checksum = file_checksum(header, job.tokens, std::span(&payload, 1));

  const std::string path = path_of(id);
  const std::string temporary = path + std::string(kTemporarySuffix);
  std::string problem;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    problem = "cannot create " + temporary + ": " + errno_text();
  } else {
    const bool written = write_fully(fd, &header, sizeof(header)) &&
                         write_fully(fd, job.tokens.data(), job.tokens.size() * sizeof(int32_t)) &&
                         write_fully(fd, job.payload.data(), job.payload.size());
    if (!written) problem = "cannot write " + temporary + ": " + errno_text();
    if (::close(fd) != 0 && problem.empty()) problem = "cannot write " + temporary + ": " + errno_text();
    // Renamed only when complete: a crash before this leaves a temporary file, never a block.
    if (problem.empty() && std::rename(temporary.c_str(), path.c_str()) != 0) {
      problem = "cannot rename " + temporary + ": " + errno_text();
    }
    if (!problem.empty()) ::unlink(temporary.c_str());
  }
  std::lock_guard lock(mutex_);
  writing_bytes_ = 0;
  if (!problem.empty()) {
    // Logged the first time and then every 1000th, so a full disk does not flood the log.
    if (counters_.write_errors++ % 1000 == 0) {
      spdlog::warn("KV disk tier: {} (blocks stay in RAM only)", problem);
    }
    return;
  }
  lru_.push_back(id);
  files_[id] = {bytes, std::prev(lru_.end())};
  counters_.bytes += bytes;
  ++counters_.blocks_written;
  counters_.bytes_written += static_cast<uint64_t>(bytes);
}

void KvDiskTier::evict_for(int64_t incoming) {
  while (!lru_.empty() && file_bytes() + incoming > max_bytes_) {
    remove_locked(lru_.front());
    ++counters_.files_evicted;
  }
}

void KvDiskTier::remove_locked(const FileId& id) {
  auto file = files_.find(id);
  TACHYON_CHECK(file != files_.end());
  ::unlink(path_of(id).c_str());
  counters_.bytes -= file->second.bytes;
  lru_.erase(file->second.lru_position);
  files_.erase(file);
}

void KvDiskTier::reject(const FileId& id, const std::string& why) {
  spdlog::warn("KV disk tier: ignoring {}: {}; the block is recomputed", path_of(id), why);
  std::lock_guard lock(mutex_);
  ++counters_.files_rejected;
  if (files_.contains(id)) remove_locked(id);
}

}  // namespace tachyon
