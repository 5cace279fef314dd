#include "model_files/file_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace tachyon {
namespace {

constexpr int64_t kHeadBytes = int64_t{4} << 20;
constexpr int64_t kSampleBytes = int64_t{64} << 10;
constexpr int kSamples = 256;

// SHA-256 over the file's name, size, head and samples.
Result<Sha256Digest> fingerprint_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<uint8_t> bytes;
  auto read_at = [&](int64_t offset, int64_t count) {
    count = std::clamp<int64_t>(count, 0, size - offset);
    const size_t start = bytes.size();
    bytes.resize(start + static_cast<size_t>(count));
    int64_t done = 0;
    while (done < count) {
      const ssize_t n = ::pread(fd, bytes.data() + start + done, count - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += n;
    }
    return true;
  };
  bool ok = size >= 0 && read_at(0, kHeadBytes);
  for (int i = 0; ok && i < kSamples && size > kHeadBytes; ++i) {
    ok = read_at(kHeadBytes + (size - kHeadBytes) * i / kSamples, kSampleBytes);
  }
  ::close(fd);
  if (!ok) return io_error(fmt::format("cannot read {}", path.string()));
  const std::string name = path.filename().string();
  const int64_t size64 = size;
  return sha256({as_bytes(name),
                 std::span(reinterpret_cast<const uint8_t*>(&size64), sizeof(size64)),
                 std::span<const uint8_t>(bytes)});
}

}  // namespace

Result<Sha256Digest> fingerprint_model_files(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return fingerprint_file(path);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (error) return io_error(fmt::format("cannot list {}: {}", path, error.message()));
  std::sort(files.begin(), files.end());
  Sha256Digest digest{};
  for (const auto& file : files) {
    TACHYON_ASSIGN_OR_RETURN(const Sha256Digest one, fingerprint_file(file));
    digest = sha256({std::span<const uint8_t>(digest), std::span<const uint8_t>(one)});
  }
  return digest;
}

}  // namespace tachyon
