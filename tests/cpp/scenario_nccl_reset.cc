// A worker lost, then tfring started again on the ranks left, with GPU tensors: what
// tfring.elastic does after a reset (MPI's revoke and shrink, a new runtime on the shrunk
// world). The old runtime's NCCL world communicator, whose member is dead, is kept; the new
// runtime shrinks it to the ranks left where this NCCL has ncclCommShrink, else aborts it
// and makes its own (as with TFRING_NCCL_RESHAPE=off) on its first GPU collective.
//
//   MPIRUN="mpirun --with-ft ulfm" tools/gpu_ranks.sh 3 build/tests/scenario_nccl_reset
//
// Its last rank dies, so the suite does not run it; tools/gpu_checks.sh does, both ways.
#include <cuda_runtime_api.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // MPIX_Comm_revoke, MPIX_Comm_shrink (ULFM)
#endif

#include <chrono>
#include <csignal>
#include <memory>
#include <string>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"

namespace tfring {
namespace testing {
namespace {

// The survivors shrink the world with ULFM's calls, which this MPI must have.
class ResetEnvironment : public SurvivorsGpuEnvironment {
 protected:
  std::string Unsupported() const override {
#if defined(MPIX_ERR_PROC_FAILED)
    return "";
#else
    return "this MPI has no ULFM (MPIX_Comm_shrink)";
#endif
  }
};
TFRING_TEST_ENVIRONMENT(ResetEnvironment);

TFRING_TEST(NcclReset, SurvivorsMakeNcclAgainOnTheShrunkWorld) {
#if defined(MPIX_ERR_PROC_FAILED)
  ASSERT_TRUE(Scenario().layout.size >= 3) << "run it with 3 ranks or more";
  const int me = Scenario().layout.rank, victim = Scenario().layout.size - 1;
  Options options;
  options.peer_timeout_seconds = 30;
  std::unique_ptr<Coordinator> c =
      NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
  bool right = false;
  ASSERT_TRUE(DeviceSumOfRanks(c.get(), "before", &right).ok());
  EXPECT_TRUE(right);
  if (me == victim) raise(SIGKILL);  // no GPU op in flight: its communicators look healthy
  OpPtr host = SubmitAllreduce(c.get(), "host", DataType::kFloat32, {4},
                               TestValues(DataType::kFloat32, me, 4), ReduceOp::kSum);
  const Status lost = WaitFor(host, 20.0);
  EXPECT_FALSE(lost.ok());
  EXPECT_CONTAINS(lost.message(), "rank " + std::to_string(victim));
  // The old runtime goes, though a member of its NCCL world is dead.
  const auto stop = std::chrono::steady_clock::now();
  c->Shutdown();
  c.reset();
  const double stop_seconds = SecondsSince(stop);
  EXPECT_LT(stop_seconds, 10.0);
  // What tfring.elastic does next: revoke the world, shrink it, start again on it.
  const auto restart = std::chrono::steady_clock::now();
  std::string why;
  ASSERT_TRUE(ShrinkScenarioToSurvivors(&why)) << why;
  EXPECT_EQ(Scenario().layout.size, victim);
  EXPECT_EQ(Scenario().layout.rank, me);
  c = NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
  const Status after = DeviceSumOfRanks(c.get(), "after", &right);
  std::printf("rank %d: old runtime stopped in %.3f s; NCCL world of %d %s and used in "
              "%.3f s: %s, sums %s\n", me, stop_seconds, Scenario().layout.size,
              WorldMade().c_str(), SecondsSince(restart), after.ToString().c_str(),
              right ? "right" : "WRONG");
  EXPECT_TRUE(after.ok()) << after.ToString();
  EXPECT_TRUE(right);
  EXPECT_EQ(WorldMade(), ExpectedWorldMade("shrunk", ReshapeCalls().shrink != nullptr));
  c->Shutdown();
#endif
}

}  // namespace
}  // namespace testing
}  // namespace tfring
