// ExpertCache: the routed experts of a model larger than RAM (--experts-mem). Everything else is
// resident as usual; the experts stay in the model file and at most `capacity` bytes of them are
// resident at a time, copied (and repacked for the SIMD kernels, as resident weights are) into
// fixed-size slots when a step chooses them. A slot is reused by the expert used least
// (use counts that halve as time passes, so yesterday's hot experts cool down; ties: the least
// recently used). Misses are read with pread on the cache's own descriptor, never through the
// mapping: a file that shrinks or vanishes under a running server gives a ModelReadError (the
// step's requests end with an error), not a SIGBUS. The same bits come out as with every expert
// resident: the slots hold the same layout the loader would have made.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/huge_page_arena.h"
#include "core/memory_amount.h"
#include "core/thread_pool.h"
#include "core/status.h"
#include "kernels/cpu/matmul.h"

namespace tachyon {

// The model file failed while a forward pass needed an expert from it (it shrank, vanished from
// a network mount, an I/O error). Thrown by ExpertCache::acquire; the model's public entry points
// turn it into an io_error Status.
class ModelReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ExpertCache {
 public:
  // One expert's matrices as the kernels read them; valid until the next acquire().
  struct Resident {
    const kernels::WeightMatrix* gate = nullptr;
    const kernels::WeightMatrix* up = nullptr;
    const kernels::WeightMatrix* down = nullptr;
  };
  struct Counters {
    uint64_t hits = 0;          // chosen experts found resident
    uint64_t misses = 0;        // read from the file
    uint64_t bytes_read = 0;    // from the file, by misses
    uint64_t prefetches = 0;    // experts asked to be read ahead (not resident then): a
                                // step's misses and the next layer's likely choice
    int64_t resident_bytes = 0;  // slots holding an expert
    int64_t capacity_bytes = 0;  // all slots
    int64_t expert_bytes = 0;    // every routed expert of the model, as stored in the file
  };

  // `path`: the model file, whose bytes are mapped at `file_base` (the matrices handed to
  // add_layer point into that mapping). `repack`: slots hold the SIMD kernels' layout
  // (RepackedWeights) where the type has one, else the file's.
  static Result<std::unique_ptr<ExpertCache>> open(const std::string& path,
                                                   const uint8_t* file_base, bool repack);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // A layer's routed experts, as views into the mapping (per expert: [rows, cols] each);
  // returns the index acquire() and prefetch() take.
  int add_layer(const std::vector<kernels::WeightMatrix>& gate,
                const std::vector<kernels::WeightMatrix>& up,
                const std::vector<kernels::WeightMatrix>& down);
  // Sizes the slots after the last add_layer: `limit` (--experts-mem: bytes, or a fraction of
  // the routed experts' bytes in the file) must hold one whole layer's experts (a step may
  // choose every one of them), else an error that says how much it needs.
  Status allocate(const MemoryAmount& limit);

  // Makes `experts` (distinct ids) of `layer` resident, reading the missing ones from the file
  // (on every thread of `pool`: reads in parallel, each repacked by the thread that read it),
  // and writes their matrices to out[i]. Throws ModelReadError when the file fails. Callers
  // prefetch() the same experts first, as early as they know them.
  void acquire(int layer, std::span<const int> experts, std::vector<Resident>& out,
               ThreadPool& pool);
  // Asks the kernel to read ahead the file bytes of those of `experts` not resident (the next
  // layer's likely choice, while this one computes).
  void prefetch(int layer, std::span<const int> experts);

  // Thread-safe (a snapshot of counters the forward pass updates).
  Counters counters() const;
  int num_slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Source {  // an expert's bytes in the file
    kernels::WeightMatrix gate, up, down;  // views into the mapping
    int slot = -1;                          // where it is resident, or -1
  };
  struct Slot {
    uint8_t* memory = nullptr;
    kernels::WeightMatrix gate, up, down;  // as the kernels read them
    int layer = -1, expert = -1;           // the occupant, or -1
    double uses = 0;                       // halved every `num_slots` acquisitions
    uint64_t last_call = 0;                // acquire() call that last used it
  };

  ExpertCache(int fd, std::string path, const uint8_t* file_base, bool repack)
      : fd_(fd), path_(std::move(path)), file_base_(file_base), repack_(repack) {}
  // Bytes a slot needs for one matrix (64-byte multiple).
  int64_t slot_bytes(const kernels::WeightMatrix& w) const;
  int64_t stored_bytes(const kernels::WeightMatrix& w) const;
  int choose_victim() const;
  // Asks the kernel to read the expert's bytes ahead (posix_fadvise WILLNEED).
  void advise(const Source& source) const;
  // Reads `w`'s bytes from the file (through `staging` when repacking) and puts them at `out`
  // in the slot's layout, where `previous` was; returns the matrix as the kernels read it.
  kernels::WeightMatrix load_matrix(const kernels::WeightMatrix& w,
                                    const kernels::WeightMatrix& previous, uint8_t* out,
                                    std::vector<uint8_t>& staging, int layer, int expert);
  // Reads an expert's three matrices into `slot` (any thread; throws ModelReadError).
  void fill(Slot& slot, const Source& source, int layer, int expert,
            std::vector<uint8_t>& staging);
  void read_exactly(uint8_t* out, int64_t bytes, int64_t offset, int layer, int expert);

  int fd_ = -1;
  std::string path_;
  const uint8_t* file_base_ = nullptr;
  bool repack_ = true;
  std::vector<std::vector<Source>> layers_;
  std::vector<Slot> slots_;
  int64_t slot_size_ = 0;
  // Per pool thread: a matrix as the file holds it, before repacking.
  std::vector<std::vector<uint8_t>> staging_;
  HugePageArena arena_;
  uint64_t calls_ = 0;
  uint64_t acquisitions_since_aging_ = 0;
  int64_t capacity_bytes_ = 0;
  int64_t expert_bytes_ = 0;
  std::atomic<uint64_t> hits_{0}, misses_{0}, bytes_read_{0}, prefetches_{0};
  std::atomic<int64_t> resident_bytes_{0};
};

}  // namespace tachyon
