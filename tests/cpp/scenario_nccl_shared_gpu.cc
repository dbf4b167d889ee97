// Two ranks of one host on one GPU, as a script that forgot to pin gets them: NCCL refuses
// them ("Duplicate GPU detected"), and tfring says so first, on every rank, naming the ranks
// and how to pin, instead of NCCL's words on one rank while the other waits.
//
//   mpirun -np 2 -x TFRING_TEST_SHARE_GPU=1 build/tests/scenario_nccl_shared_gpu
//
// Needs the ranks on one GPU of one host, so without tools/gpu_ranks.sh (which gives each
// rank a host of its own with NCCL_HOSTID); tools/gpu_checks.sh runs it.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/gpu_ranks.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

class SharedGpuEnvironment : public SurvivorsGpuEnvironment {
 protected:
  std::string Unsupported() const override {
    if (std::getenv("NCCL_HOSTID") != nullptr) {
      return "NCCL_HOSTID is set: each rank claims a host of its own";
    }
    if (Scenario().layout.local_size < 2) return "needs two ranks on this host";
    if (!RanksShareGpus()) return "needs TFRING_TEST_SHARE_GPU=1 (the ranks on one GPU)";
    return "";
  }
};
TFRING_TEST_ENVIRONMENT(SharedGpuEnvironment);

TFRING_TEST(SharedGpu, EveryRankFailsSayingWhichRanksShareAGpuAndHowToPin) {
  Options options;
  options.peer_timeout_seconds = 30;
  std::unique_ptr<Coordinator> c = NewNcclCoordinator(Scenario().mpi, Scenario().layout, options);
  const auto start = std::chrono::steady_clock::now();
  bool right = false;
  const Status s = DeviceSumOfRanks(c.get(), "unpinned", &right);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(SecondsSince(start), 10.0) << s.ToString();
  EXPECT_CONTAINS(s.message(), "ranks 0 and 1 both use the GPU at PCI");
  EXPECT_CONTAINS(s.message(), "tfring.pin_gpu()");
  // Host collectives go on: the job can say so and end.
  OpPtr host = SubmitAllreduce(c.get(), "host", DataType::kFloat32, {4},
                               TestValues(DataType::kFloat32, Scenario().layout.rank, 4),
                               ReduceOp::kSum);
  ExpectAllreduced(host, ReduceOp::kSum, Scenario().layout.size, 0);
  c->Shutdown();
}

}  // namespace
}  // namespace testing
}  // namespace tfring
