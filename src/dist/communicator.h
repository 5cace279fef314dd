// The collective operations processes running one model together need, whatever carries them:
// MPI between CPU processes and hosts today (MpiCommunicator), NCCL between GPUs later. A
// communicator is a fixed group of ranks 0..size()-1; every rank of the group calls a
// collective with matching arguments, in the same order. Failures of the transport are not
// reported per call: a rank that cannot reach the others ends the whole job (a lost peer
// leaves no consistent state to continue from).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/function_ref.h"

namespace tachyon::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `bytes` bytes at `data` from `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same, but waits by polling with growing sleeps (up to `max_sleep_us` between polls)
  // rather than spinning: for ranks that wait, idle, for the next command.
  virtual void broadcast_idle(void* data, size_t bytes, int root, int max_sleep_us) = 0;
  // Every rank's `counts[rank]` floats at `send` end up in `recv` on every rank, rank after
  // rank at `offsets[rank]` (floats). `send` may be recv + offsets[rank] (already in place).
  virtual void all_gather(const float* send, std::span<const int> counts,
                          std::span<const int> offsets, float* recv) = 0;
  // A matrix split by columns: every rank's f32 [rows, widths[rank]] block at `send` (rows back
  // to back) lands in `recv` (f32 [rows, stride], not overlapping `send`) at column
  // columns[rank], on every rank: a tensor-parallel product's rows gathered straight into place.
  virtual void all_gather_columns(const float* send, int64_t rows, std::span<const int> widths,
                                  std::span<const int> columns, float* recv, int64_t stride) = 0;
  // Every rank's block of `bytes[rank]` bytes (whole 4-byte words) at `send`, handed on every
  // rank to `receive(rank, block)`, rank after rank (this rank's own too); `block` is valid
  // only during that call. For data whose layout the caller owns (e.g. quantized column
  // blocks), so that the receiver copies each block once, straight to where it goes.
  using BlockReceiver = FunctionRef<void(int rank, const std::byte* block)>;
  virtual void all_gather_blocks(const void* send, std::span<const int64_t> bytes,
                                 BlockReceiver receive) = 0;
  // The same collected on `root` only (recv is read only there).
  virtual void gather(const float* send, std::span<const int> counts,
                      std::span<const int> offsets, float* recv, int root) = 0;
  // Each rank sends `send_counts[r]` floats at `send + send_offsets[r]` to rank r and receives
  // `recv_counts[r]` floats from rank r at `recv + recv_offsets[r]` (the expert exchange: each
  // rank's rows go only to the ranks that need them). A rank's counts to itself may be 0.
  virtual void all_to_all(const float* send, std::span<const int> send_counts,
                          std::span<const int> send_offsets, float* recv,
                          std::span<const int> recv_counts, std::span<const int> recv_offsets) = 0;
  // data = the sum over ranks of every rank's data, on every rank (`count` floats).
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // Point to point, matched by (peer, tag).
  virtual void send(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual void receive(void* data, size_t bytes, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // The ranks that pass the same `color` form a new communicator, ordered by `key`.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank of the job with exit status `code`: for a rank that cannot go on.
  [[noreturn]] virtual void abort(int code) = 0;
};

}  // namespace tachyon::dist
