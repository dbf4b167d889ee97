// MpiContext: MPI's lifetime in this process and the process layout it reveals.
//
// Initializes MPI with MPI_THREAD_MULTIPLE unless someone (mpi4py, the application) already
// did, and then finalizes it only if it initialized it. Communicators handed to the
// control plane and the backend are duplicates of MPI_COMM_WORLD, so tfring's traffic never
// matches the application's own MPI messages.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"

namespace tfring {

struct ProcessLayout {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this host
  int cross_rank = 0, cross_size = 1;  // this host among hosts (ranks with the same local_rank)
};

class MpiContext {
 public:
  // Idempotent. Fills `layout` on success.
  static Status Initialize(ProcessLayout* layout);
  // Finalizes MPI if tfring initialized it and MPI is still usable.
  static void Finalize();
  static bool threads_supported();
  // A fresh duplicate of MPI_COMM_WORLD with errors returned, not fatal.
  static Status DupWorld(MPI_Comm* comm);
  // The ranks on this host (ordered by world rank), and the ranks that share this rank's
  // local rank (one per host: with local rank 0, the hosts' leaders). Errors returned.
  static Status SplitLocal(MPI_Comm* comm);
  static Status SplitCross(MPI_Comm* comm);
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
};

}  // namespace tfring
