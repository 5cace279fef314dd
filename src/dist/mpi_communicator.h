// Communicator over MPI (OpenMPI from Debian's packages): shared memory between the ranks of
// one host, TCP or InfiniBand between hosts, as `mpirun` chooses (`--mca btl tcp,self` forces
// TCP). Only the C API is used.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"

namespace tachyon::dist {

class SharedMemoryExchange;

// True when this process was started by mpirun (or another MPI launcher) as one of several.
bool launched_by_mpi();

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD, initialising MPI first (once per process; MPI_Finalize runs at exit).
  // Calls may come from any thread, one at a time (MPI_THREAD_SERIALIZED at least).
  static Result<std::unique_ptr<MpiCommunicator>> world();
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void broadcast(void* data, size_t bytes, int root) override;
  void broadcast_idle(void* data, size_t bytes, int root, int max_sleep_us) override;
  void all_gather(const float* send, std::span<const int> counts, std::span<const int> offsets,
                  float* recv) override;
  void all_gather_columns(const float* send, int64_t rows, std::span<const int> widths,
                          std::span<const int> columns, float* recv, int64_t stride) override;
  void all_gather_blocks(const void* send, std::span<const int64_t> bytes,
                         BlockReceiver receive) override;
  void gather(const float* send, std::span<const int> counts, std::span<const int> offsets,
              float* recv, int root) override;
  void all_to_all(const float* send, std::span<const int> send_counts,
                  std::span<const int> send_offsets, float* recv, std::span<const int> recv_counts,
                  std::span<const int> recv_offsets) override;
  void all_reduce_sum(float* data, size_t count) override;
  void send(const void* data, size_t bytes, int peer, int tag) override;
  void receive(void* data, size_t bytes, int peer, int tag) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  [[noreturn]] void abort(int code) override;

 private:
  // `handle` points to a heap MPI_Comm (opaque, so that this header needs no mpi.h).
  MpiCommunicator(void* handle, bool owned);
  // Whether the all-gathers go through `shared_` (decided collectively at the first call).
  bool use_shared_memory();

  void* handle_;
  bool owned_;  // freed with MPI_Comm_free (split results), not MPI_COMM_WORLD
  int rank_ = 0;
  int size_ = 1;
  // all_gather_blocks (and all_gather_columns through it): through a shared-memory window
  // when every rank is on this host (made at the first call, collectively; `shared_checked_`
  // once decided), else rank-major through MPI into `exchange_` (4-byte words), then unpacked.
  std::unique_ptr<SharedMemoryExchange> shared_;
  bool shared_checked_ = false;
  std::vector<uint32_t> exchange_;
  std::vector<int64_t> column_bytes_;  // all_gather_columns: each rank's block (reused)
};

}  // namespace tachyon::dist
