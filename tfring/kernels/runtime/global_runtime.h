// The one global of the library: the runtime that the TF kernels and the C API find.
// It composes MPI (context, control plane, backend) with the Coordinator; nothing else in
// the runtime knows that it is global.
#pragma once

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
  void Shutdown();    // stops the coordinator; init() may be called again later
  void AtExit();      // Shutdown(), then finalize MPI if tfring initialized it
  bool initialized();
  ProcessLayout layout();  // valid once initialized
  // Whether MPI runs with MPI_THREAD_MULTIPLE; false before init.
  bool mpi_threads_supported();

  // The timeline (rank 0 writes it): FailedPrecondition before init.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();
  // The fusion threshold and cycle time in force; false before init.
  bool TunedParamsNow(TunedParams* params);

  // Queues `entry`, or fails it at once when the runtime is not initialized.
  void Enqueue(Entry entry);
  // The tensors of one op, queued together (Coordinator::EnqueueAll).
  void EnqueueAll(std::vector<Entry> entries);

  // The name of this process's next unnamed eager call in `process_set` ("unnamed.<n>",
  // n counting such calls in that set since init: core/unnamed_names.h). Ranks that make
  // the same calls agree.
  // Taken only by a call that is about to be queued, so a call that fails its checks
  // first shifts nothing.
  std::string NextUnnamedName(const std::vector<int32_t>& process_set);

 private:
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
};

}  // namespace tfring
