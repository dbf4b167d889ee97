// A rank killed outright (SIGKILL) in the middle of a NCCL allreduce: its peers wait inside
// NCCL for a part that will never come. Each survivor must fail that op within seconds,
// naming the tensor and the dead rank, then fail later GPU ops at once, and not hang in its
// host collectives either; then it exits.
//
//   mpirun --with-ft ulfm -np 3 build/tests/scenario_nccl_peer_killed      # a GPU per rank
//   MPIRUN="mpirun --with-ft ulfm" tools/gpu_ranks.sh 3 build/tests/scenario_nccl_peer_killed
//
// Without ULFM, mpirun ends the whole job when a rank is killed (and says which); under it,
// the survivors live on and report, then start again on the ranks left as tfring.elastic
// does: where NCCL has ncclCommRevoke and ncclCommShrink, the failed op's world communicator
// was revoked (not aborted) and is shrunk to them; else one is made anew. tools/gpu_checks.sh
// runs both. The suite runs it on the host GPU (tests/cpp/host_gpu), with a smaller
// allreduce (TFRING_TEST_BIG_MIB) over connections slowed so that it lasts a second, the kill
// 300 ms into it (TFRING_TEST_KILL_AFTER_MS; TFRING_HOST_GPU_MB_PER_SECOND), and requires
// there what a GPU run only reports (TFRING_TEST_EXPECT_RESTART=1): that the op failed inside
// the NCCL collective, that the survivors restarted on the ranks left, and how their world
// was made (shrunk where NCCL can revoke and shrink, else made anew).
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"

namespace tfring {
namespace testing {
namespace {

TFRING_TEST_ENVIRONMENT(SurvivorsGpuEnvironment);

bool ExpectRestart() {
  const char* setting = std::getenv("TFRING_TEST_EXPECT_RESTART");
  return setting != nullptr && std::string(setting) == "1";
}

TFRING_TEST(NcclPeerKilled, SurvivorsFailTheOpNamingTensorAndDeadRank) {
  ASSERT_TRUE(Scenario().layout.size >= 2) << "run it with 2 ranks or more";
  Options options;
  options.peer_timeout_seconds = 30;  // longer than the checks below: the notice must act
  std::unique_ptr<Coordinator> c =
      NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
  // 1 GiB: through sockets it takes over half a second, so the kill lands mid-op.
  const char* mib = std::getenv("TFRING_TEST_BIG_MIB");
  const int64_t count = (mib != nullptr ? std::atoll(mib) : 1024) << 18;  // floats
  void* in = ZeroedDeviceBuffer(count * 4);
  void* out = ZeroedDeviceBuffer(count * 4);
  ASSERT_TRUE(SubmitDeviceAllreduce(c.get(), "warmup", 1024, in, out).get().ok());
  const int victim = Scenario().layout.size - 1;
  const auto start = std::chrono::steady_clock::now();
  std::future<Status> big = SubmitDeviceAllreduce(c.get(), "big", count, in, out);
  if (Scenario().layout.rank == victim) {
    const char* after = std::getenv("TFRING_TEST_KILL_AFTER_MS");
    // By then its kernels are running (negotiation takes a few milliseconds).
    std::this_thread::sleep_for(std::chrono::milliseconds(after ? std::atoi(after) : 50));
    raise(SIGKILL);
  }
  ASSERT_TRUE(big.wait_for(std::chrono::seconds(60)) == std::future_status::ready)
      << "rank " << Scenario().layout.rank << ": the op neither finished nor failed in 60 s";
  const double seconds = SecondsSince(start);
  const Status s = big.get();
  std::printf("rank %d: 'big' ended after %.3f s: %s\n", Scenario().layout.rank, seconds,
              s.ToString().c_str());
  EXPECT_FALSE(s.ok());
  EXPECT_LT(seconds, 10.0);
  EXPECT_CONTAINS(s.message(), "'big'");
  // MPI's word that the rank died (ULFM) names it. NCCL's own (its socket closed) may come
  // first, and a survivor may hear another survivor's announcement of it: the words differ.
  const std::string died = "rank " + std::to_string(victim) + " died";
  const bool why = s.message().find(died) != std::string::npos ||
                   s.message().find("remote process exited") != std::string::npos;
  EXPECT_TRUE(why) << "neither '" << died << "' nor NCCL's remote error in: " << s.message();
  // Failed inside the collective, not before it (the control plane's loss of the rank).
  if (ExpectRestart()) {
    EXPECT_CONTAINS(s.message(), "NCCL allreduce of 'big' failed");
  }
  // Later GPU ops fail at once.
  const auto later_start = std::chrono::steady_clock::now();
  const Status later = SubmitDeviceAllreduce(c.get(), "later", 1024, in, out).get();
  std::printf("rank %d: 'later' ended after %.3f s: %s\n", Scenario().layout.rank,
              SecondsSince(later_start), later.ToString().c_str());
  EXPECT_FALSE(later.ok());
  // The control plane has lost the rank too by now: later ops fail at once, naming it.
  EXPECT_CONTAINS(later.message(), "rank " + std::to_string(victim));
  // A host collective needs the dead rank too: it must fail (naming it), not hang.
  const auto host_start = std::chrono::steady_clock::now();
  OpPtr host = SubmitAllreduce(c.get(), "host after", DataType::kFloat32, {6},
                               TestValues(DataType::kFloat32, Scenario().layout.rank, 6), ReduceOp::kSum);
  const Status host_status = WaitFor(host);
  std::printf("rank %d: 'host after' ended after %.3f s: %s\n", Scenario().layout.rank,
              SecondsSince(host_start), host_status.ToString().c_str());
  EXPECT_FALSE(host_status.ok());
  EXPECT_LT(SecondsSince(host_start), 10.0);
  EXPECT_CONTAINS(host_status.message(), "rank " + std::to_string(victim));
  c->Shutdown();
  c.reset();
  cudaFree(in);
  cudaFree(out);
  // Under ULFM: start again on the ranks left, as tfring.elastic does.
  std::string no_restart;
  const auto restart = std::chrono::steady_clock::now();
  if (!ShrinkScenarioToSurvivors(&no_restart)) {
    std::printf("rank %d: no restart on the ranks left (%s)\n", Scenario().layout.rank,
                no_restart.c_str());
    EXPECT_FALSE(ExpectRestart()) << "the survivors were to restart: " << no_restart;
    return;
  }
  c = NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
  bool right = false;
  const Status after = DeviceSumOfRanks(c.get(), "after restart", &right);
  // Shrunk where the failed op's communicator could be revoked; NCCL may report its own
  // error instead of stopping cleanly, and then it was aborted and is made anew.
  std::printf("rank %d: NCCL world of %d %s and used %.3f s after the restart began: %s, "
              "sums %s (ncclCommRevoke %s, ncclCommShrink %s)\n",
              Scenario().layout.rank, Scenario().layout.size, WorldMade().c_str(),
              SecondsSince(restart), after.ToString().c_str(), right ? "right" : "WRONG",
              ReshapeCalls().revoke ? "yes" : "no", ReshapeCalls().shrink ? "yes" : "no");
  EXPECT_TRUE(after.ok()) << after.ToString();
  EXPECT_TRUE(right);
  if (ExpectRestart()) {
    EXPECT_EQ(WorldMade(), ExpectedWorldMade("shrunk", ReshapeCalls().revoke != nullptr &&
                                                           ReshapeCalls().shrink != nullptr));
  }
  c->Shutdown();
}

}  // namespace
}  // namespace testing
}  // namespace tfring
