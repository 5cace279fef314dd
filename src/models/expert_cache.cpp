#include "models/expert_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "kernels/cpu/kernel_level.h"
#include "kernels/cpu/repacked_weights.h"

namespace tachyon {
namespace {

constexpr int64_t kAlignment = 64;

int64_t round_up(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

std::string format_bytes(int64_t bytes) {
  const double value = static_cast<double>(bytes);
  if (value >= 1024.0 * 1024 * 1024) {
    return fmt::format("{:.2f} GiB", value / (1024.0 * 1024 * 1024));
  }
  if (value >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", value / (1024.0 * 1024));
  if (value >= 1024.0) return fmt::format("{:.1f} KiB", value / 1024.0);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

Result<std::unique_ptr<ExpertCache>> ExpertCache::open(const std::string& path,
                                                       const uint8_t* file_base,
                                                       bool repack) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return io_error(fmt::format("--experts-mem: cannot open {}: {}", path, std::strerror(errno)));
  }
  // The kernels at the portable level read the file's layout only.
  repack = repack && kernels::active_kernel_level() != kernels::KernelLevel::kReference;
  return std::unique_ptr<ExpertCache>(new ExpertCache(fd, path, file_base, repack));
}

ExpertCache::~ExpertCache() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t ExpertCache::stored_bytes(const kernels::WeightMatrix& w) const {
  return static_cast<int64_t>(w.row_bytes()) * w.rows;
}

int64_t ExpertCache::slot_bytes(const kernels::WeightMatrix& w) const {
  if (repack_ && kernels::RepackedWeights::supports(w)) {
    return round_up(kernels::RepackedWeights::packed_bytes(w));
  }
  return round_up(stored_bytes(w));
}

int ExpertCache::add_layer(const std::vector<kernels::WeightMatrix>& gate,
                           const std::vector<kernels::WeightMatrix>& up,
                           const std::vector<kernels::WeightMatrix>& down) {
  std::vector<Source>& layer = layers_.emplace_back();
  for (size_t e = 0; e < gate.size(); ++e) {
    layer.push_back(Source{gate[e], up[e], down[e]});
    slot_size_ = std::max(slot_size_, slot_bytes(gate[e]) + slot_bytes(up[e]) + slot_bytes(down[e]));
    expert_bytes_ += stored_bytes(gate[e]) + stored_bytes(up[e]) + stored_bytes(down[e]);
  }
  return static_cast<int>(layers_.size()) - 1;
}

Status ExpertCache::allocate(const MemoryAmount& limit) {
  size_t most_experts = 0;
  for (const std::vector<Source>& layer : layers_) most_experts = std::max(most_experts, layer.size());
  const int64_t capacity =
      limit.bytes > 0 ? limit.bytes
                      : static_cast<int64_t>(limit.fraction * static_cast<double>(expert_bytes_));
  const int64_t needed = slot_size_ * static_cast<int64_t>(most_experts);
  if (capacity < needed) {
    return invalid_argument(fmt::format(
        "--experts-mem {} is smaller than one layer's experts: {} experts of {} each need {} "
        "(the model's routed experts take {} in all)",
        format_bytes(capacity), most_experts, format_bytes(slot_size_), format_bytes(needed),
        format_bytes(expert_bytes_)));
  }
  // No more slots than experts: a cache that holds them all is the resident case.
  size_t total_experts = 0;
  for (const std::vector<Source>& layer : layers_) total_experts += layer.size();
  const size_t count = std::min(total_experts, static_cast<size_t>(capacity / slot_size_));
  uint8_t* memory = arena_.try_allocate(static_cast<size_t>(slot_size_) * count);
  if (memory == nullptr) {
    return out_of_range(fmt::format("--experts-mem: cannot reserve {} for {} expert slots",
                                    format_bytes(slot_size_ * static_cast<int64_t>(count)), count));
  }
  slots_.resize(count);
  for (size_t i = 0; i < count; ++i) slots_[i].memory = memory + slot_size_ * static_cast<int64_t>(i);
  capacity_bytes_ = slot_size_ * static_cast<int64_t>(count);
  return Status();
}

ExpertCache::Counters ExpertCache::counters() const {
  Counters counters;
  counters.hits = hits_.load(std::memory_order_relaxed);
  counters.misses = misses_.load(std::memory_order_relaxed);
  counters.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  counters.prefetches = prefetches_.load(std::memory_order_relaxed);
  counters.resident_bytes = resident_bytes_.load(std::memory_order_relaxed);
  counters.capacity_bytes = capacity_bytes_;
  counters.expert_bytes = expert_bytes_;
  return counters;
}

int ExpertCache::choose_victim() const {
  int victim = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& slot = slots_[i];
    if (slot.last_call == calls_) continue;  // chosen (or being filled) in this very call
    if (slot.expert < 0) return i;           // a free slot
    if (victim < 0 || slot.uses < slots_[victim].uses ||
        (slot.uses == slots_[victim].uses && slot.last_call < slots_[victim].last_call)) {
      victim = i;
    }
  }
  return victim;
}

void ExpertCache::read_exactly(uint8_t* out, int64_t bytes, int64_t offset, int layer,
                               int expert) {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, out + done, static_cast<size_t>(bytes - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // (Any pool thread may be here: the error code's message, not strerror's buffer.)
      throw ModelReadError(fmt::format(
          "cannot read expert {} of layer {} from {} (bytes {}..{}): {}", expert, layer, path_,
          offset, offset + bytes,
          got == 0 ? "the file is shorter than when it was loaded"
                   : std::error_code(errno, std::generic_category()).message()));
    }
    done += got;
  }
  bytes_read_.fetch_add(static_cast<uint64_t>(bytes), std::memory_order_relaxed);
}

kernels::WeightMatrix ExpertCache::load_matrix(const kernels::WeightMatrix& w,
                                               const kernels::WeightMatrix& previous, uint8_t* out,
                                               std::vector<uint8_t>& staging, int layer,
                                               int expert) {
  const int64_t bytes = stored_bytes(w);
  const int64_t offset = w.data - file_base_;
  kernels::WeightMatrix resident = w;
  if (repack_ && kernels::RepackedWeights::supports(w)) {
    staging.resize(static_cast<size_t>(bytes));
    read_exactly(staging.data(), bytes, offset, layer, expert);
    kernels::WeightMatrix staged = w;
    staged.data = staging.data();
    // repack_into wants zeroed memory (padding: a last partial tile, Q6_K's scales): the slot
    // was zeroed when allocated, and a matrix of the same type and shape leaves the same
    // padding bytes zero; another kind of matrix may not have.
    if (previous.type != w.type || previous.rows != w.rows || previous.cols != w.cols) {
      std::memset(out, 0, static_cast<size_t>(kernels::RepackedWeights::packed_bytes(w)));
    }
    kernels::RepackedWeights::repack_into(staged, out);
    // `data` stays the mapping's, as for resident repacked matrices; the SIMD kernels read
    // only `packed`.
    resident.packed = out;
  } else {
    read_exactly(out, bytes, offset, layer, expert);
    resident.data = out;
    resident.packed = nullptr;
  }
  return resident;
}

void ExpertCache::fill(Slot& slot, const Source& source, int layer, int expert,
                       std::vector<uint8_t>& staging) {
  uint8_t* memory = slot.memory;
  slot.gate = load_matrix(source.gate, slot.gate, memory, staging, layer, expert);
  memory += slot_bytes(source.gate);
  slot.up = load_matrix(source.up, slot.up, memory, staging, layer, expert);
  memory += slot_bytes(source.up);
  slot.down = load_matrix(source.down, slot.down, memory, staging, layer, expert);
  // The slot holds the expert now: the page cache's copy would only hold the same bytes twice,
  // where another expert could be (the RAM left beside the slots caches the file too).
  for (const kernels::WeightMatrix* w : {&source.gate, &source.up, &source.down}) {
    (void)::posix_fadvise(fd_, w->data - file_base_, stored_bytes(*w), POSIX_FADV_DONTNEED);
  }
}

void ExpertCache::acquire(int layer, std::span<const int> experts, std::vector<Resident>& out,
                          ThreadPool& pool) {
  ++calls_;
  std::vector<Source>& sources = layers_.at(layer);
  out.resize(experts.size());
  // Hits first, so that no miss evicts an expert this call needs.
  for (const int e : experts) {
    const int slot = sources[e].slot;
    if (slot >= 0) slots_[slot].last_call = calls_;
  }
  acquisitions_since_aging_ += experts.size();
  if (acquisitions_since_aging_ >= slots_.size()) {
    for (Slot& slot : slots_) slot.uses *= 0.5;
    acquisitions_since_aging_ = 0;
  }
  // Each miss gets a slot (its occupant evicted), then every thread fills some of them.
  struct Fill {
    int expert;
    int slot;
    std::string error;
  };
  std::vector<Fill> fills;
  for (const int e : experts) {
    if (sources[e].slot >= 0) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    const int victim = choose_victim();
    Slot& slot = slots_.at(victim);  // allocate() made room for a whole layer
    if (slot.expert >= 0) {
      layers_[slot.layer][slot.expert].slot = -1;
      resident_bytes_.fetch_sub(slot_size_, std::memory_order_relaxed);
    }
    slot.layer = slot.expert = -1;  // empty until filled (a failed read leaves it so)
    slot.uses = 0;
    slot.last_call = calls_;
    fills.push_back(Fill{e, victim, {}});
  }
  if (!fills.empty()) {
    staging_.resize(static_cast<size_t>(pool.num_threads()));
    auto fill_some = [&](int thread, int num_threads) {
      for (size_t i = static_cast<size_t>(thread); i < fills.size(); i += num_threads) {
        try {
          fill(slots_[fills[i].slot], sources[fills[i].expert], layer, fills[i].expert,
               staging_[thread]);
        } catch (const ModelReadError& error) {
          fills[i].error = error.what();
        }
      }
    };
    if (fills.size() == 1) {
      fill_some(0, 1);
    } else {
      pool.run(fill_some);
    }
    const std::string* failure = nullptr;
    for (const Fill& done : fills) {
      if (!done.error.empty()) {
        failure = &done.error;
        continue;
      }
      Slot& slot = slots_[done.slot];
      slot.layer = layer;
      slot.expert = done.expert;
      sources[done.expert].slot = done.slot;
      resident_bytes_.fetch_add(slot_size_, std::memory_order_relaxed);
    }
    if (failure != nullptr) throw ModelReadError(*failure);
  }
  for (size_t i = 0; i < experts.size(); ++i) {
    Slot& slot = slots_[sources[experts[i]].slot];
    slot.uses += 1;
    slot.last_call = calls_;
    out[i] = Resident{&slot.gate, &slot.up, &slot.down};
  }
}

void ExpertCache::prefetch(int layer, std::span<const int> experts) {
  const std::vector<Source>& sources = layers_.at(layer);
  for (const int e : experts) {
    const Source& source = sources.at(e);
    if (source.slot >= 0) continue;
    prefetches_.fetch_add(1, std::memory_order_relaxed);
    advise(source);
  }
}

void ExpertCache::advise(const Source& source) const {
  for (const kernels::WeightMatrix* w : {&source.gate, &source.up, &source.down}) {
    // Advice only: a failure here shows up, if it matters, as the read's error.
    (void)::posix_fadvise(fd_, w->data - file_base_, stored_bytes(*w), POSIX_FADV_WILLNEED);
  }
}

}  // namespace tachyon
