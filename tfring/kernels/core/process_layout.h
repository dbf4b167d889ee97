// Where this process sits in the job, and which processes make up the job: plain values the
// runtime, the TF glue and the GPU executor share, without naming MPI (the MPI context fills
// them: backends/mpi/mpi_context.h).
#pragma once

#include <cstdint>
#include <vector>

namespace tfring {

struct ProcessLayout {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this host
  int cross_rank = 0, cross_size = 1;  // this host among hosts (ranks with the same local_rank)
};

// Which processes make up tfring's world (Horovod's init(comm=...)): every process of
// MPI_COMM_WORLD, the world ranks listed (in that order), or the processes of a communicator
// the application made (mpi4py's, passed as its Fortran handle).
struct WorldChoice {
  enum class Kind { kAll, kRanks, kCommunicator } kind = Kind::kAll;
  std::vector<int32_t> ranks;     // kRanks: MPI_COMM_WORLD ranks
  int64_t fortran_handle = 0;     // kCommunicator: MPI_Comm_c2f of the application's comm
};

}  // namespace tfring
