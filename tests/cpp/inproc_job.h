// InprocJob: a "job" of `size` ranks in one process for the coordinator tests. Each rank is
// a Coordinator over an InprocControlPlane and an InprocBackend; ranks share one InprocWorld
// per communicator (control and data), as MPI ranks share tfring's two duplicated
// communicators. The coordinators' background threads are the ranks' threads. Process sets
// work as in the library: a set's executors are made on first use, over an InprocWorld of
// its members (as MPI makes a communicator of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tests/cpp/fake_device_memory.h"
#include "tfring/kernels/core/control_plane.h"
#include "tfring/kernels/core/coordinator.h"

namespace tfring {
namespace testing {

class InprocJob {
 public:
  // Builds and starts one coordinator per rank. `world_timeout_seconds` bounds every wait
  // for a peer in a collective, so a logic error fails ops instead of hanging the test.
  InprocJob(int size, const Options& options, double world_timeout_seconds = 20.0);
  // With a device path: each rank's GPU tensors go through a StagingExecutor over
  // FakeDeviceMemory (host memory standing in for a GPU's) and its own in-process backend.
  InprocJob(int size, const Options& options, FakeDeviceMemory::Counters* device_counters,
            double world_timeout_seconds = 20.0);
  // With each rank's host backend passed through `wrap` (a test's fault injection, say).
  using WrapBackend =
      std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend> backend, int rank)>;
  InprocJob(int size, const Options& options, const WrapBackend& wrap);
  // With each rank's control plane passed through `control_plane` (a test's damage to the
  // coordinator's messages, say) and its host backend through `backend`; either may be
  // empty. The wrapper sits between the coordinator's round counting (negotiation_rounds)
  // and the in-process control plane, so it sees the encoded bytes each rank sends.
  using WrapControlPlane = std::function<std::unique_ptr<ControlPlane>(
      std::unique_ptr<ControlPlane> control_plane, int rank)>;
  struct Wrappers {
    WrapControlPlane control_plane;
    WrapBackend backend;
  };
  InprocJob(int size, const Options& options, const Wrappers& wrap,
            double world_timeout_seconds = 20.0);
  ~InprocJob();  // Shutdown()

  int size() const { return static_cast<int>(coordinators_.size()); }
  Coordinator* rank(int r) { return coordinators_[r].get(); }
  // Negotiation rounds (control-plane gathers) rank `r` has taken part in so far: in steady
  // state, with every tensor in the response cache, this stops growing.
  int64_t negotiation_rounds(int r) const { return rounds_[r]->load(); }

  // Runs `fn(rank)` on one thread per rank (as application threads submitting ops would) and
  // joins them.
  void OnEveryRank(const std::function<void(int rank)>& fn);

  // Shuts every rank's coordinator down, concurrently (each Shutdown waits for the
  // collective cycle in which all ranks stop). Idempotent.
  void Shutdown();

 private:
  InprocJob(int size, const Options& options, FakeDeviceMemory::Counters* device_counters,
            double world_timeout_seconds, const Wrappers& wrap);

  std::vector<std::unique_ptr<std::atomic<int64_t>>> rounds_;
  std::vector<std::unique_ptr<Coordinator>> coordinators_;
};

// Options for fast tests: short cycles, no stall warnings.
Options TestOptions();

}  // namespace testing
}  // namespace tfring
