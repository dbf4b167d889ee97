// Which peers of a communicator have failed, where the MPI can say (ULFM: Open MPI 5 and
// MPICH 4 have MPIX_Comm_get_failed). Under `mpirun --with-ft ulfm` a rank whose peer dies
// gets MPI_ERR_PROC_FAILED from its next collective instead of being killed with the job:
// this turns that into an error that names the dead ranks.
#pragma once

#include <mpi.h>

#include <vector>

namespace tfring {

// The ranks of `comm` that MPI knows have failed, when `rc` (an MPI error code from a call on
// `comm`) is an error; empty where none has, and wherever the MPI has no ULFM.
std::vector<int> FailedPeers(MPI_Comm comm, int rc);

}  // namespace tfring
