// MpiContext: MPI's lifetime in this process and the process layout it reveals.
//
// Initializes MPI with MPI_THREAD_MULTIPLE unless someone (mpi4py, the application) already
// did, and then finalizes it only if it initialized it. Communicators handed to the
// control plane and the backend are duplicates of tfring's world (MPI_COMM_WORLD, or the
// processes init(comm=...) named), so tfring's traffic never matches the application's own
// MPI messages.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/process_layout.h"

namespace tfring {

// One per runtime (GlobalRuntime owns it; a native test may make its own). Not thread-safe:
// its owner calls it under its own lock.
class MpiContext {
 public:
  // Initializes MPI unless it already is (by tfring or by someone else), makes tfring's
  // world as `choice` says (collective over its members) and fills `layout` as seen within
  // it. Called again (after a shutdown), it makes the world anew.
  Status Initialize(const WorldChoice& choice, ProcessLayout* layout);
  // Finalizes MPI if this context initialized it and MPI is still usable (which frees the
  // world made for the choice with everything else). Initialize cannot be called after that.
  void Finalize();
  // Finalizes MPI whoever initialized it (mpi4py, say), unless it already is finalized.
  void FinalizeAnyway();
  // tfring's world: MPI_COMM_WORLD, or the communicator Initialize made for the choice.
  MPI_Comm world() const { return world_; }
  // Forgets the world without freeing it (a peer in it died), so the next Initialize
  // makes a new one instead of freeing this.
  void AbandonWorld() { world_ = MPI_COMM_WORLD; }
  bool threads_supported() const { return thread_level_ == MPI_THREAD_MULTIPLE; }
  // A fresh duplicate of tfring's world with errors returned, not fatal.
  Status DupWorld(MPI_Comm* comm) const;
  // The ranks on this host (ordered by world rank), and the ranks that share this rank's
  // local rank (one per host: with local rank 0, the hosts' leaders). Errors returned.
  Status SplitLocal(MPI_Comm* comm) const;
  Status SplitCross(MPI_Comm* comm) const;

  // The same over any communicator `parent` (a process set's): a duplicate of it, its ranks
  // on this host, and its ranks with this rank's local rank; `layout` as seen within it.
  // Every output communicator returns errors. Collective over `parent`.
  static Status SplitWithin(MPI_Comm parent, MPI_Comm* dup, MPI_Comm* local, MPI_Comm* cross,
                            ProcessLayout* layout);
  // A communicator over the world ranks `ranks` (ascending, including this rank), made from
  // `world` (a duplicate of MPI_COMM_WORLD). Collective over `ranks` only.
  static Status CreateGroup(MPI_Comm world, const std::vector<int32_t>& ranks, MPI_Comm* comm);
  // "Open MPI v5.0.11, ..." as MPI_Get_library_version reports it (first line).
  static std::string LibraryVersion();

 private:
  Status MakeWorld(const WorldChoice& choice);
  Status ComputeLayout();

  bool we_initialized_ = false;  // this context called MPI_Init_thread
  int thread_level_ = MPI_THREAD_SINGLE;
  MPI_Comm world_ = MPI_COMM_WORLD;
  ProcessLayout layout_;
};

}  // namespace tfring
