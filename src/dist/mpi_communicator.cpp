#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/check.h"
#include "dist/shared_memory_exchange.h"

namespace tachyon::dist {
namespace {

MPI_Comm comm_of(void* handle) { return *static_cast<MPI_Comm*>(handle); }

// MPI counts are ints: messages past 2 GiB go in pieces.
constexpr size_t kMaxPiece = static_cast<size_t>(INT_MAX) & ~size_t{63};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// The shared-memory exchange, unless the user chose the transport: TACHYON_MPI_SHARED_MEMORY=0,
// or OpenMPI's byte transfer layers set without its shared-memory one (`--mca btl tcp,self`
// reaches the ranks as OMPI_MCA_btl), so that a forced transport carries every byte.
bool shared_memory_allowed() {
  const char* setting = std::getenv("TACHYON_MPI_SHARED_MEMORY");
  if (setting != nullptr && std::string_view(setting) == "0") return false;
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (btl == nullptr) return true;
  std::string_view layers(btl);
  const bool excluded = layers.starts_with('^');  // "^a,b": every layer but those
  if (excluded) layers.remove_prefix(1);
  bool named = false;
  while (!layers.empty()) {
    const size_t comma = std::min(layers.find(','), layers.size());
    const std::string_view layer = layers.substr(0, comma);
    named = named || layer == "vader" || layer == "sm";
    layers.remove_prefix(std::min(comma + 1, layers.size()));
  }
  return named != excluded;
}

}  // namespace

bool launched_by_mpi() {
  // OpenMPI's launcher sets these; PMIx-based launchers (prterun, srun) PMIX_RANK.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::world() {
  static std::once_flag once;
  static int provided = 0;
  static int init_error = MPI_SUCCESS;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&provided);
      return;
    }
    init_error = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (init_error == MPI_SUCCESS) std::atexit(finalize_at_exit);
  });
  if (init_error != MPI_SUCCESS) return unavailable("MPI could not be initialised");
  if (provided < MPI_THREAD_SERIALIZED) {
    return unsupported("this MPI library does not allow calls from more than one thread "
                       "(MPI_THREAD_SERIALIZED)");
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(new MPI_Comm(MPI_COMM_WORLD), false));
}

MpiCommunicator::MpiCommunicator(void* handle, bool owned) : handle_(handle), owned_(owned) {
  MPI_Comm_rank(comm_of(handle_), &rank_);
  MPI_Comm_size(comm_of(handle_), &size_);
}

MpiCommunicator::~MpiCommunicator() {
  auto* comm = static_cast<MPI_Comm*>(handle_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(comm);
  delete comm;
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMaxPiece) {
    const size_t piece = std::min(kMaxPiece, bytes - done);
    MPI_Bcast(p + done, static_cast<int>(piece), MPI_BYTE, root, comm_of(handle_));
  }
}

void MpiCommunicator::broadcast_idle(void* data, size_t bytes, int root, int max_sleep_us) {
  TACHYON_CHECK(bytes <= kMaxPiece);
  MPI_Request request;
  MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_of(handle_), &request);
  // Spin briefly (the next step usually follows at once), then sleep longer and longer.
  int sleep_us = 0;
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (polls < 2000) continue;
    sleep_us = std::min(max_sleep_us, sleep_us + 10);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
}

void MpiCommunicator::all_gather(const float* send, std::span<const int> counts,
                                 std::span<const int> offsets, float* recv) {
  TACHYON_CHECK(static_cast<int>(counts.size()) == size_ &&
                static_cast<int>(offsets.size()) == size_);
  // A rank's part already in place in `recv` goes as MPI_IN_PLACE (MPI forbids the aliasing).
  const void* from = send == recv + offsets[rank_] ? MPI_IN_PLACE : send;
  MPI_Allgatherv(from, counts[rank_], MPI_FLOAT, recv, counts.data(), offsets.data(), MPI_FLOAT,
                 comm_of(handle_));
}

void MpiCommunicator::all_gather_columns(const float* send, int64_t rows,
                                         std::span<const int> widths, std::span<const int> columns,
                                         float* recv, int64_t stride) {
  TACHYON_CHECK(static_cast<int>(widths.size()) == size_ &&
                static_cast<int>(columns.size()) == size_);
  if (rows == 1 && !use_shared_memory()) {  // one row over MPI: every block straight into place
    all_gather(send, widths, columns, recv);
    return;
  }
  column_bytes_.resize(widths.size());
  for (size_t r = 0; r < widths.size(); ++r) {
    column_bytes_[r] = rows * widths[r] * static_cast<int64_t>(sizeof(float));
  }
  all_gather_blocks(send, column_bytes_, [&](int rank, const std::byte* block) {
    const auto r = static_cast<size_t>(rank);
    copy_rows_strided(reinterpret_cast<const float*>(block), rows, widths[r], recv + columns[r],
                      stride);
  });
}

bool MpiCommunicator::use_shared_memory() {
  if (!shared_checked_) {
    // Every rank must take the same path: allowed only where all ranks allow it.
    int allowed = shared_memory_allowed() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &allowed, 1, MPI_INT, MPI_MIN, comm_of(handle_));
    if (allowed) shared_ = SharedMemoryExchange::create(comm_of(handle_));
    shared_checked_ = true;
  }
  return shared_ != nullptr;
}

void MpiCommunicator::all_gather_blocks(const void* send, std::span<const int64_t> bytes,
                                        BlockReceiver receive) {
  TACHYON_CHECK(static_cast<int>(bytes.size()) == size_);
  if (use_shared_memory()) {
    shared_->all_gather_blocks(send, bytes, receive);
    return;
  }
  // Counted in 4-byte words (MPI counts are ints: up to 8 GiB in all, as for f32 rows).
  static const MPI_Datatype word = [] {
    MPI_Datatype type;
    MPI_Type_contiguous(4, MPI_BYTE, &type);
    MPI_Type_commit(&type);
    return type;
  }();
  std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t count = bytes[static_cast<size_t>(r)];
    TACHYON_CHECK(count >= 0 && count % 4 == 0 && total + count / 4 <= INT_MAX);
    counts[static_cast<size_t>(r)] = static_cast<int>(count / 4);
    offsets[static_cast<size_t>(r)] = static_cast<int>(total);
    total += count / 4;
  }
  exchange_.resize(static_cast<size_t>(total));
  MPI_Allgatherv(send, counts[static_cast<size_t>(rank_)], word, exchange_.data(), counts.data(),
                 offsets.data(), word, comm_of(handle_));
  for (int r = 0; r < size_; ++r) {
    receive(r, reinterpret_cast<const std::byte*>(exchange_.data() +
                                                  offsets[static_cast<size_t>(r)]));
  }
}

void MpiCommunicator::gather(const float* send, std::span<const int> counts,
                             std::span<const int> offsets, float* recv, int root) {
  TACHYON_CHECK(static_cast<int>(counts.size()) == size_ &&
                static_cast<int>(offsets.size()) == size_);
  MPI_Gatherv(send, counts[rank_], MPI_FLOAT, recv, counts.data(), offsets.data(), MPI_FLOAT,
              root, comm_of(handle_));
}

void MpiCommunicator::all_to_all(const float* send, std::span<const int> send_counts,
                                 std::span<const int> send_offsets, float* recv,
                                 std::span<const int> recv_counts,
                                 std::span<const int> recv_offsets) {
  TACHYON_CHECK(static_cast<int>(send_counts.size()) == size_ &&
                static_cast<int>(send_offsets.size()) == size_ &&
                static_cast<int>(recv_counts.size()) == size_ &&
                static_cast<int>(recv_offsets.size()) == size_);
  MPI_Alltoallv(send, send_counts.data(), send_offsets.data(), MPI_FLOAT, recv, recv_counts.data(),
                recv_offsets.data(), MPI_FLOAT, comm_of(handle_));
}

void MpiCommunicator::all_reduce_sum(float* data, size_t count) {
  for (size_t done = 0; done < count; done += kMaxPiece / sizeof(float)) {
    const size_t piece = std::min(kMaxPiece / sizeof(float), count - done);
    MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(piece), MPI_FLOAT, MPI_SUM,
                  comm_of(handle_));
  }
}

void MpiCommunicator::send(const void* data, size_t bytes, int peer, int tag) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes; done += kMaxPiece) {
    const size_t piece = std::min(kMaxPiece, bytes - done);
    MPI_Send(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_of(handle_));
  }
}

void MpiCommunicator::receive(void* data, size_t bytes, int peer, int tag) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMaxPiece) {
    const size_t piece = std::min(kMaxPiece, bytes - done);
    MPI_Recv(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_of(handle_),
             MPI_STATUS_IGNORE);
  }
}

void MpiCommunicator::barrier() { MPI_Barrier(comm_of(handle_)); }

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  auto* comm = new MPI_Comm;
  MPI_Comm_split(comm_of(handle_), color, key, comm);
  return std::unique_ptr<Communicator>(new MpiCommunicator(comm, true));
}

void MpiCommunicator::abort(int code) {
  MPI_Abort(comm_of(handle_), code);
  std::abort();  // not reached
}

}  // namespace tachyon::dist
