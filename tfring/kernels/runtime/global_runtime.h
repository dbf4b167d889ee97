// The one global of the library: the runtime that the TF kernels and the C API find.
// It composes MPI (context, control plane, backend) with the Coordinator; nothing else in
// the runtime knows that it is global.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <mutex>

#include "tfring/kernels/core/coordinator.h"
#include "tfring/kernels/core/process_layout.h"

namespace tfring {

class MpiContext;  // backends/mpi: kept out of this header, which TF kernels include

class GlobalRuntime {
 public:
  static GlobalRuntime& Get();

  // Idempotent while running; MPI is initialized on first use. `world` picks the processes
  // that make up the job (Horovod's init(comm=...)).
  Status Init(const WorldChoice& world = WorldChoice());
  // Stops the coordinator; init() may be called again later. `for_reset`: an elastic reset
  // follows (tfring.elastic), whose next runtime may keep, shrink or grow this one's NCCL
  // world communicator; otherwise that is freed too, as the user's shutdown() frees all.
  void Shutdown(bool for_reset = false);
  void AtExit();      // Shutdown(), then finalize MPI if tfring initialized it
  // AtExit(), and MPI_Finalize whoever initialized MPI if `finalize_anyway`, under a
  // deadline: a call still waiting after `seconds` (Open MPI's finalize can wait for ever
  // after a lost worker; tfring/_elastic/process_end.py) prints `message` and ends the process
  // with `exit_status`. Its own thread keeps the time: no lock (the GIL) can stop it.
  void AtExitWithin(double seconds, bool finalize_anyway, int exit_status,
                    const std::string& message);
  bool initialized();
  // Whether the running (or last failed) runtime lost a peer: one died or stopped
  // answering, and its collectives failed for that (tfring.elastic re-forms the job then).
  // False after shutdown() and before init().
  bool peer_lost();
  // True when the runtime last started stopped on a failure (Coordinator::failed) with no
  // peer lost, running or since shut down: then MPI_Finalize at exit may wait for a rank
  // that never exits (tfring/_process/runtime.py bounds it).
  bool stopped_on_failure();
  // TFRING_PEER_TIMEOUT_SECONDS as the last init() read it (its default before).
  double peer_timeout_seconds();
  ProcessLayout layout();  // valid once initialized

  // What an op needs of the running runtime, taken under one lock: the coordinator (a
  // reference, so that a concurrent Shutdown cannot free it while the op is handed over;
  // Shutdown waits for such references to go) and this process's layout.
  struct Running {
    std::shared_ptr<Coordinator> coordinator;
    ProcessLayout layout;
  };
  // Fills `running`; false before init() (the caller reports NotInitialized, common/status.h).
  bool Acquire(Running* running);
  // Whether MPI runs with MPI_THREAD_MULTIPLE; false before init.
  bool mpi_threads_supported();

  // How many times tfring.elastic renumbered the ranks in this process (Python's
  // process_sets.new_world sets it): an op whose process set was made in an earlier world
  // (its "process_set_world" attribute) is refused, since its ranks may name other
  // processes now. Any thread; no lock.
  int64_t process_set_world() const { return process_set_world_.load(); }
  void set_process_set_world(int64_t world) { process_set_world_.store(world); }

  // The timeline (rank 0 writes it): FailedPrecondition before init.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();
  // The fusion threshold and cycle time in force; false before init.
  bool TunedParamsNow(TunedParams* params);
  // The straggler report rank 0 last sent (Coordinator::StragglerReport); false before init.
  bool StragglerReport(std::string* json);

  // Queues `entry`, or fails it at once when the runtime is not initialized (for callers
  // without a Running: the C API's and the native tests').
  void Enqueue(Entry entry, const OpCountdown* countdown = nullptr);
  // The tensors of one op, queued together (Coordinator::EnqueueAll).
  void EnqueueAll(std::vector<Entry> entries, const OpCountdown* countdown = nullptr);

 private:
  void StopCoordinator();  // Shutdown's part but the device world's release
  GlobalRuntime();
  ~GlobalRuntime();

  std::mutex mutex_;
  // MPI's lifetime and tfring's world in it; used under mutex_.
  std::unique_ptr<MpiContext> mpi_;
  // Shared: Enqueue takes its own reference under the lock and calls the coordinator after
  // releasing it, so a concurrent Shutdown (another thread, an atexit during an op) cannot
  // destroy the coordinator under it. Shutdown waits for those references to go.
  std::shared_ptr<Coordinator> coordinator_;
  ProcessLayout layout_;
  bool peers_lost_ = false;
  bool shut_down_after_failure_ = false;  // the last coordinator, shut down, had failed
  double peer_timeout_seconds_ = Options().peer_timeout_seconds;
  std::atomic<int64_t> process_set_world_{0};
};

}  // namespace tfring
