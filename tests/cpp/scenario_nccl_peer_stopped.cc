// A rank stopped (SIGSTOP) in the middle of a NCCL allreduce, its process alive and its
// connections open: nothing reports it (NCCL over NVLink or shared memory says nothing of a
// peer that stopped), so only tfring's GPU peer timeout can end its peers' wait. Each other
// rank must fail that op once TFRING_PEER_TIMEOUT_SECONDS have passed since its inputs were
// ready, not before and not much after, saying why; then fail later GPU ops and a host
// collective within the control plane's own timeout (the same setting) instead of waiting for
// the stopped rank. Then the first rank resumes it (SIGCONT): its op fails too (its peers'
// notice), and the job ends. (Neither timeout can name the stopped rank yet: the GPU
// collective and the control plane's allreduce only see that some peer did not answer.)
//
//   MPIRUN="mpirun --with-ft ulfm" tools/gpu_ranks.sh 3 build/tests/scenario_nccl_peer_stopped
//
// The suite runs it on the host GPU, with the allreduce slowed (TFRING_TEST_BIG_MIB,
// TFRING_HOST_GPU_MB_PER_SECOND) so that it lasts past the stop, 300 ms into it.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"

namespace tfring {
namespace testing {
namespace {

TFRING_TEST_ENVIRONMENT(SurvivorsGpuEnvironment);

constexpr double kPeerTimeoutSeconds = 3;

TFRING_TEST(NcclPeerStopped, ThePeerTimeoutEndsEveryOtherRanksWait) {
  const int size = Scenario().layout.size, me = Scenario().layout.rank, victim = size - 1;
  ASSERT_TRUE(size >= 2) << "run it with 2 ranks or more";
  std::vector<int> pids(size);
  const int pid = getpid();
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, Scenario().mpi.world());
  Options options;
  options.peer_timeout_seconds = kPeerTimeoutSeconds;
  std::unique_ptr<Coordinator> c = NewNcclCoordinator(Scenario().mpi, Scenario().layout, options);
  const char* mib = std::getenv("TFRING_TEST_BIG_MIB");
  const int64_t count = (mib != nullptr ? std::atoll(mib) : 1024) << 18;  // floats
  void* in = ZeroedDeviceBuffer(count * 4);
  void* out = ZeroedDeviceBuffer(count * 4);
  ASSERT_TRUE(SubmitDeviceAllreduce(c.get(), "warmup", 1024, in, out).get().ok());
  const auto start = std::chrono::steady_clock::now();
  std::future<Status> big = SubmitDeviceAllreduce(c.get(), "big", count, in, out);
  if (me == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its collective runs
    raise(SIGSTOP);  // until the first rank sends SIGCONT
    const Status s = big.get();
    std::printf("rank %d (stopped, resumed): 'big' ended: %s\n", me, s.ToString().c_str());
    EXPECT_FALSE(s.ok());
    c->Shutdown();
    return;
  }
  ASSERT_TRUE(big.wait_for(std::chrono::seconds(60)) == std::future_status::ready)
      << "rank " << me << ": the op neither finished nor failed in 60 s";
  const double seconds = SecondsSince(start);
  const Status s = big.get();
  std::printf("rank %d: 'big' ended after %.3f s: %s\n", me, seconds, s.ToString().c_str());
  EXPECT_FALSE(s.ok());
  EXPECT_CONTAINS(s.message(), "'big'");
  // Its own timeout, or a peer's notice that its timeout fired: either way the GPU's.
  EXPECT_CONTAINS(s.message(), "TFRING_PEER_TIMEOUT_SECONDS");
  EXPECT_TRUE(seconds >= kPeerTimeoutSeconds) << "failed early, after " << seconds << " s";
  EXPECT_LT(seconds, kPeerTimeoutSeconds + 5);
  const auto later_start = std::chrono::steady_clock::now();
  const Status later = SubmitDeviceAllreduce(c.get(), "later", 1024, in, out).get();
  std::printf("rank %d: 'later' ended after %.3f s: %s\n", me, SecondsSince(later_start),
              later.ToString().c_str());
  EXPECT_FALSE(later.ok());
  // Its negotiation needs the stopped rank: the control plane's timeout ends it.
  EXPECT_LT(SecondsSince(later_start), kPeerTimeoutSeconds + 5);
  EXPECT_CONTAINS(later.message(), "TFRING_PEER_TIMEOUT_SECONDS");
  // And a host collective after it fails at once: tfring has stopped.
  const auto host_start = std::chrono::steady_clock::now();
  OpPtr host = SubmitAllreduce(c.get(), "host after", DataType::kFloat32, {6},
                               TestValues(DataType::kFloat32, me, 6), ReduceOp::kSum);
  const Status host_status = WaitFor(host);
  std::printf("rank %d: 'host after' ended after %.3f s: %s\n", me, SecondsSince(host_start),
              host_status.ToString().c_str());
  EXPECT_FALSE(host_status.ok());
  EXPECT_LT(SecondsSince(host_start), 1.0);
  EXPECT_CONTAINS(host_status.message(), "TFRING_PEER_TIMEOUT_SECONDS");
  if (me == 0) kill(pids[victim], SIGCONT);
  c->Shutdown();
  cudaFree(in);
  cudaFree(out);
}

}  // namespace
}  // namespace testing
}  // namespace tfring
