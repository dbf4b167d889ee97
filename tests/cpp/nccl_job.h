// Coordinators as runtime/global_runtime.cc builds them for GPU tensors, over MPI_COMM_WORLD,
// for the native GPU tests and scenarios (no TensorFlow): one with the NCCL executor, one
// staging GPU tensors through host memory (TFRING_GPU_OPERATIONS=mpi).
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/coordinator.h"

namespace tfring {
namespace testing {

// Prints why setup failed and aborts the whole job: nothing can be tested past it.
[[noreturn]] void DieInSetup(const char* who, const Status& s);

// NCCL executor (world, local and cross communicators, a failure notice), MPI control plane.
// `keep_world`: as the global runtime's, its world communicator is left to the next
// coordinator's (backends/nccl/nccl_kept_world.h), unless TFRING_NCCL_RESHAPE=off.
std::unique_ptr<Coordinator> NewNcclCoordinator(const MpiContext& mpi, const ProcessLayout& layout,
                                                Options options, bool keep_world = false);

// Whether TFRING_NCCL_RESHAPE=off (the runtime reads it with its other settings).
bool ReshapeOff();

// How the elastic scenarios' new NCCL world should have been made from the kept one, `way`
// ("shrunk", "grown"), where this NCCL has the call (`has_call`) and TFRING_NCCL_RESHAPE
// is not off; else "made anew". TFRING_TEST_EXPECT_WORLD, where set, is the answer instead.
std::string ExpectedWorldMade(const std::string& way, bool has_call);
// How the latest NCCL world communicator was made (KeptWorld's note).
std::string WorldMade();

// What tfring.elastic does after a lost rank, with ULFM: revoke MPI's world, shrink it to the
// ranks alive, and take that as the scenario's world. False (and why) where it failed.
bool ShrinkScenarioToSurvivors(std::string* why);

// GPU tensors staged through host memory (CudaMemory: its own stream, waiting on the
// producers' events) and reduced over MPI.
std::unique_ptr<Coordinator> NewStagingCoordinator(const MpiContext& mpi,
                                                   const ProcessLayout& layout, Options options);

// The job of a GPU scenario one of whose ranks dies (scenario_nccl_*.cc): MPI's world, this
// rank's GPU, and why the scenario cannot run here, if it cannot.
struct ScenarioJob {
  MpiContext mpi;
  ProcessLayout layout;
  int device = -1;
  std::string skip;
};
ScenarioJob& Scenario();

// Sets the scenario's job up; each survivor judges its tests alone (an agreement across
// ranks would need the dead one). A scenario that needs more than a GPU says what it lacks
// in Unsupported().
class SurvivorsGpuEnvironment : public Environment {
 public:
  void SetUp() override;
  void TearDown() override;
  std::string SkipReason() const override;
  bool verbose() const override;

 protected:
  virtual std::string Unsupported() const { return ""; }
};

double SecondsSince(std::chrono::steady_clock::time_point start);

// `bytes` of device memory, zeroed, set before tfring's stream reads it; the job aborted
// (DieInSetup) where it cannot be had.
void* ZeroedDeviceBuffer(int64_t bytes);

// Enqueues an allreduce (Sum) of `count` floats from `in` into `out` on the scenario's GPU;
// the future holds its status.
std::future<Status> SubmitDeviceAllreduce(Coordinator* c, const std::string& name, int64_t count,
                                          void* in, void* out);

// An allreduce (Sum) of 1024 floats, each this rank's rank + 1, on device buffers, in the
// scenario's job: the status, and whether every element came back as the sum over its ranks.
Status DeviceSumOfRanks(Coordinator* c, const std::string& name, bool* right);

}  // namespace testing
}  // namespace tfring
