// Time per collective against message size over the MPI transport tachyon's --tp/--pp use:
// the all-gather of a tensor-parallel product's rows, the all-to-all of the expert exchange
// (each rank sends bytes / ranks to every rank, itself included), the all-reduce, the leader's
// broadcast and a pipeline stage's send (ping-pong, one way). Each size: a median over repetitions of
// the slowest rank's time. One JSON object per line on rank 0 (bench/scale_model.py reads
// them to fit latency and bandwidth).
//   mpirun -np 2 build/bench/collectives_benchmark [--max-bytes N] [--repetitions N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dist/mpi_communicator.h"

namespace {

using tachyon::dist::Communicator;

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median over `repetitions` of the slowest rank's time for one call of `body`.
template <typename Body>
double median_time(Communicator& world, int repetitions, Body body) {
  std::vector<double> times;
  for (int r = 0; r < repetitions + 2; ++r) {  // two warm-up rounds
    world.barrier();
    const double start = seconds_now();
    body();
    float elapsed = static_cast<float>(seconds_now() - start);
    std::vector<int> counts(world.size(), 1), offsets(world.size());
    for (int i = 0; i < world.size(); ++i) offsets[i] = i;
    std::vector<float> all(world.size());
    world.all_gather(&elapsed, counts, offsets, all.data());
    if (r >= 2) times.push_back(*std::max_element(all.begin(), all.end()));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = size_t{16} << 20;
  int repetitions = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-bytes") == 0) max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--repetitions") == 0) repetitions = std::atoi(argv[i + 1]);
  }
  auto world_or = tachyon::dist::MpiCommunicator::world();
  if (!world_or.ok()) {
    std::fprintf(stderr, "%s\n", world_or.status().message().c_str());
    return 1;
  }
  Communicator& world = **world_or;
  const int ranks = world.size();
  for (size_t bytes = 256; bytes <= max_bytes; bytes *= 4) {
    const int floats = static_cast<int>(bytes / sizeof(float));
    const int part = floats / ranks;
    std::vector<float> local(static_cast<size_t>(part), 1.0f), all(static_cast<size_t>(part) * ranks);
    std::vector<int> counts(ranks, part), offsets(ranks);
    for (int r = 0; r < ranks; ++r) offsets[r] = r * part;
    std::vector<float> data(static_cast<size_t>(floats), 1.0f);
    const int reps = bytes >= (size_t{4} << 20) ? std::max(5, repetitions / 5) : repetitions;
    const double gather = median_time(world, reps, [&] {
      world.all_gather(local.data(), counts, offsets, all.data());
    });
    std::vector<float> exchanged(static_cast<size_t>(part) * ranks);
    const double all_to_all = median_time(world, reps, [&] {
      world.all_to_all(data.data(), counts, offsets, exchanged.data(), counts, offsets);
    });
    const double reduce = median_time(world, reps, [&] {
      world.all_reduce_sum(data.data(), data.size());
    });
    const double broadcast = median_time(world, reps, [&] {
      world.broadcast(data.data(), bytes, 0);
    });
    // Rank 0 and rank 1 bounce the message; the others wait. One way: half the round trip.
    const double send = median_time(world, reps, [&] {
      if (world.rank() == 0) {
        world.send(data.data(), bytes, 1, 7);
        world.receive(data.data(), bytes, 1, 7);
      } else if (world.rank() == 1) {
        world.receive(data.data(), bytes, 0, 7);
        world.send(data.data(), bytes, 0, 7);
      }
    }) / 2;
    if (world.rank() == 0) {
      std::printf("%s\n", fmt::format("{{\"ranks\": {}, \"bytes\": {}, \"all_gather_us\": {:.2f}, "
                                       "\"all_to_all_us\": {:.2f}, \"all_reduce_us\": {:.2f}, \"broadcast_us\": {:.2f}, "
                                       "\"send_us\": {:.2f}}}",
                                       ranks, bytes, gather * 1e6, all_to_all * 1e6, reduce * 1e6, broadcast * 1e6,
                                       send * 1e6)
                              .c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
