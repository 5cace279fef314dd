// The memory-bandwidth probe behind `tachyon bench`'s roofline: one buffer, measured again and
// again (bench probes around every decode repetition), each time a plausible rate.
#include "kernels/cpu/bandwidth_probe.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(BandwidthProbeTest, MeasuresTheSameBufferRepeatedly) {
  ThreadPool pool(2);
  kernels::BandwidthProbe probe(pool, size_t{16} << 20);
  for (int repetitions : {1, 2, 3}) {
    const kernels::BandwidthMeasurement m = probe.measure(repetitions);
    EXPECT_EQ(m.buffer_bytes, size_t{16} << 20);
    // Anything from a slow emulator (0.1 GB/s) to a many-channel server (10 TB/s).
    EXPECT_GT(m.bytes_per_second, 1e8);
    EXPECT_LT(m.bytes_per_second, 1e13);
  }
}

TEST(BandwidthProbeTest, TinyBuffersAreRoundedUp) {
  ThreadPool pool(1);
  const kernels::BandwidthMeasurement m = kernels::measure_read_bandwidth(pool, 10, 1);
  EXPECT_EQ(m.buffer_bytes, 1024 * sizeof(float));
  EXPECT_GT(m.bytes_per_second, 0);
}

}  // namespace
}  // namespace tachyon
