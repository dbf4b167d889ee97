// Workers joining, with GPU tensors: what tfring.elastic does when host discovery adds a
// worker (tfring/_elastic/members.py): the running ranks stop their runtime, start the new
// worker with MPI_Comm_spawn (this binary again), merge with it, and start a runtime on the
// merged world, whose first GPU collective grows the old runtime's NCCL world communicator by
// the new rank where this NCCL has ncclCommGrow, else makes one anew with the new rank in it
// (as with TFRING_NCCL_RESHAPE=off).
//
//   tools/gpu_ranks.sh 2 build/tests/scenario_nccl_grow
//
// The spawned worker shares the GPU as gpu_ranks.sh's ranks do: it is given their NCCL
// settings and a NCCL_HOSTID of its own. It spawns, so the suite does not run it (it needs
// a GPU anyway); tools/gpu_checks.sh does.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/cpp/nccl_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"

extern char** environ;

namespace tfring {
namespace testing {
namespace {

TFRING_TEST_ENVIRONMENT(SurvivorsGpuEnvironment);

std::string ThisProgram() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) DieInSetup("this program's path", Status::Internal("readlink failed"));
  path[n] = '\0';
  return path;
}

// env(1)'s arguments for the new worker: the NCCL and test settings and the paths this rank
// has (mpirun's -x does not reach spawned processes), a NCCL host of its own, the program.
std::vector<std::string> SpawnArguments(int new_rank) {
  std::vector<std::string> args;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const bool wanted = var.rfind("NCCL_", 0) == 0 || var.rfind("TFRING_", 0) == 0 ||
                        var.rfind("CUDA_", 0) == 0 || var.rfind("PATH=", 0) == 0 ||
                        var.rfind("LD_LIBRARY_PATH=", 0) == 0 ||
                        var.rfind("OPAL_PREFIX=", 0) == 0;
    if (wanted && var.rfind("NCCL_HOSTID=", 0) != 0) args.push_back(var);
  }
  args.push_back("NCCL_HOSTID=tfring-rank-" + std::to_string(new_rank));
  args.push_back(ThisProgram());
  return args;
}

// The running ranks' side: one new worker started and merged in (the old ranks first).
MPI_Comm SpawnOneAndMerge() {
  std::vector<std::string> args = SpawnArguments(Scenario().layout.size);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "map-by", ":OVERSUBSCRIBE");
  MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  const int spawned = MPI_Comm_spawn("/usr/bin/env", argv.data(), 1, info, 0,
                                     Scenario().mpi.world(), &inter, MPI_ERRCODES_IGNORE);
  MPI_Info_free(&info);
  if (spawned != MPI_SUCCESS || MPI_Intercomm_merge(inter, 0, &merged) != MPI_SUCCESS) {
    DieInSetup("the new worker", Status::Internal("MPI_Comm_spawn or MPI_Intercomm_merge failed"));
  }
  return merged;
}

TFRING_TEST(NcclGrow, AJoinedWorkerIsInTheNcclWorldMadeAgain) {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  const bool joined = parent != MPI_COMM_NULL;
  Options options;
  options.peer_timeout_seconds = 30;
  bool right = false;
  const int old_size = joined ? -1 : Scenario().layout.size;
  const auto restart = std::chrono::steady_clock::now();
  MPI_Comm merged = MPI_COMM_NULL;
  if (!joined) {
    ASSERT_TRUE(old_size >= 2) << "run it with 2 ranks or more";
    std::unique_ptr<Coordinator> c =
        NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
    const Status before = DeviceSumOfRanks(c.get(), "before", &right);
    ASSERT_TRUE(before.ok()) << before.ToString();
    EXPECT_TRUE(right);
    c->Shutdown();  // what tfring.elastic does before it grows the job
    c.reset();
    merged = SpawnOneAndMerge();
  } else if (MPI_Intercomm_merge(parent, 1, &merged) != MPI_SUCCESS) {
    DieInSetup("joining the job", Status::Internal("MPI_Intercomm_merge failed"));
  }
  Scenario().mpi.AbandonWorld();
  WorldChoice choice;
  choice.kind = WorldChoice::Kind::kCommunicator;
  choice.fortran_handle = MPI_Comm_c2f(merged);
  const Status again = Scenario().mpi.Initialize(choice, &Scenario().layout);
  ASSERT_TRUE(again.ok()) << again.ToString();
  if (joined) {
    EXPECT_EQ(Scenario().layout.rank, Scenario().layout.size - 1);
  } else {
    EXPECT_EQ(Scenario().layout.size, old_size + 1);
  }
  std::unique_ptr<Coordinator> c =
      NewNcclCoordinator(Scenario().mpi, Scenario().layout, options, /*keep_world=*/true);
  const Status after = DeviceSumOfRanks(c.get(), "after", &right);
  std::printf("rank %d%s: NCCL world of %d %s and used %.3f s after the %s: %s, sums %s\n",
              Scenario().layout.rank, joined ? " (joined)" : "", Scenario().layout.size,
              WorldMade().c_str(), SecondsSince(restart),
              joined ? "join began" : "old runtime stopped", after.ToString().c_str(),
              right ? "right" : "WRONG");
  EXPECT_TRUE(after.ok()) << after.ToString();
  EXPECT_TRUE(right);
  EXPECT_EQ(WorldMade(), ExpectedWorldMade("grown", ReshapeCalls().grow != nullptr));
  c->Shutdown();
}

}  // namespace
}  // namespace testing
}  // namespace tfring
