// The all-gathers of ranks on one host through an MPI-3 shared-memory window: each rank copies
// its block into its own slot of the window, the ranks meet at a barrier, and each reads every
// other rank's block straight from that rank's slot (a column gather copies it into place in
// its output). One copy of each remote byte instead of the shared-memory transport's two (into
// and out of its bounce buffers) plus the unpacking of the rank-major result.
//
// Private to tachyon_dist_mpi (this header includes mpi.h); MpiCommunicator uses it when every
// rank of its group shares the host and the user has not forced another transport.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dist/communicator.h"

namespace tachyon::dist {

// rows x width floats at `from` (rows back to back) into `to` (rows `stride` floats apart).
void copy_rows_strided(const float* from, int64_t rows, int64_t width, float* to, int64_t stride);

class SharedMemoryExchange {
 public:
  // Collective over `comm`. nullptr when the ranks of `comm` are not all on this host.
  static std::unique_ptr<SharedMemoryExchange> create(MPI_Comm comm);
  ~SharedMemoryExchange();
  SharedMemoryExchange(const SharedMemoryExchange&) = delete;
  SharedMemoryExchange& operator=(const SharedMemoryExchange&) = delete;

  // Communicator::all_gather_blocks. Collective; every rank passes the same sizes (the window
  // grows, collectively, at the same call on every rank).
  void all_gather_blocks(const void* send, std::span<const int64_t> bytes,
                         Communicator::BlockReceiver receive);

 private:
  explicit SharedMemoryExchange(MPI_Comm node);
  void reserve(int64_t bytes_per_buffer);
  void free_window();

  MPI_Comm node_;  // the group's ranks, all on this host (owned)
  int rank_ = 0;
  int size_ = 1;
  MPI_Win window_ = MPI_WIN_NULL;
  // Each rank's slot: two buffers of capacity_ bytes, used in turn, so that a rank may write
  // the next exchange's block while another still reads this one's (it cannot be two ahead:
  // it would have passed a barrier that rank has not reached).
  std::vector<std::byte*> slots_;
  int64_t capacity_ = 0;
  int next_buffer_ = 0;
};

}  // namespace tachyon::dist
