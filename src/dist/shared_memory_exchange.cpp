#include "dist/shared_memory_exchange.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace tachyon::dist {

void copy_rows_strided(const float* from, int64_t rows, int64_t width, float* to, int64_t stride) {
  for (int64_t row = 0; row < rows; ++row) {
    std::memcpy(to + row * stride, from + row * width, width * sizeof(float));
  }
}

std::unique_ptr<SharedMemoryExchange> SharedMemoryExchange::create(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  // Ranks on other hosts leave every rank's node group smaller: all decide alike.
  if (node_size != size) {
    MPI_Comm_free(&node);
    return nullptr;
  }
  return std::unique_ptr<SharedMemoryExchange>(new SharedMemoryExchange(node));
}

SharedMemoryExchange::SharedMemoryExchange(MPI_Comm node) : node_(node) {
  MPI_Comm_rank(node_, &rank_);
  MPI_Comm_size(node_, &size_);
}

SharedMemoryExchange::~SharedMemoryExchange() {
  // The window and the group are left to MPI_Finalize: freeing them is collective, and a
  // communicator may be destroyed on one rank while another still waits for its next command.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && window_ != MPI_WIN_NULL) MPI_Win_unlock_all(window_);
}

void SharedMemoryExchange::free_window() {
  if (window_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);
  slots_.clear();
  capacity_ = 0;
}

void SharedMemoryExchange::reserve(int64_t bytes_per_buffer) {
  if (bytes_per_buffer <= capacity_) return;
  // Whole cache lines, so that each buffer starts on one.
  const int64_t capacity = (std::max(bytes_per_buffer, 2 * capacity_) + 63) & ~int64_t{63};
  free_window();
  // Each rank's slot on its own pages (memory local to the rank that writes it).
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  std::byte* base = nullptr;
  const auto bytes = static_cast<MPI_Aint>(2 * capacity);
  MPI_Win_allocate_shared(bytes, 1, info, node_, &base, &window_);
  MPI_Info_free(&info);
  slots_.assign(static_cast<size_t>(size_), nullptr);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    MPI_Win_shared_query(window_, r, &size, &unit, &slots_[static_cast<size_t>(r)]);
    TACHYON_CHECK(size >= bytes);
  }
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
  capacity_ = capacity;
}

void SharedMemoryExchange::all_gather_blocks(const void* send, std::span<const int64_t> bytes,
                                             Communicator::BlockReceiver receive) {
  TACHYON_CHECK(static_cast<int>(bytes.size()) == size_);
  reserve(*std::max_element(bytes.begin(), bytes.end()));
  const int64_t buffer = next_buffer_ * capacity_;
  next_buffer_ ^= 1;
  const auto* own = static_cast<const std::byte*>(send);
  std::memcpy(slots_[static_cast<size_t>(rank_)] + buffer, own,
              static_cast<size_t>(bytes[static_cast<size_t>(rank_)]));
  // Writes visible, every rank's block written, then reads (MPI's unified memory model).
  MPI_Win_sync(window_);
  MPI_Barrier(node_);
  MPI_Win_sync(window_);
  for (int r = 0; r < size_; ++r) {
    receive(r, r == rank_ ? own : slots_[static_cast<size_t>(r)] + buffer);
  }
}

}  // namespace tachyon::dist
