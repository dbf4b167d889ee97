#include "tfring/kernels/backends/mpi/mpi_failures.h"

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // MPIX_ERR_PROC_FAILED, MPIX_Comm_get_failed (ULFM)
#endif

namespace tfring {

std::vector<int> FailedPeers(MPI_Comm comm, int rc) {
  std::vector<int> failed;
#if defined(MPIX_ERR_PROC_FAILED)
  // Whatever the error's class: a nonblocking collective whose peer died may report only
  // MPI_ERR_OTHER (Open MPI 5's NBC schedules do), while MPI knows which process failed.
  if (rc == MPI_SUCCESS) return failed;
  MPI_Group failed_group = MPI_GROUP_NULL, comm_group = MPI_GROUP_NULL;
  if (MPIX_Comm_get_failed(comm, &failed_group) != MPI_SUCCESS) return failed;
  int n = 0;
  MPI_Group_size(failed_group, &n);
  if (n > 0 && MPI_Comm_group(comm, &comm_group) == MPI_SUCCESS) {
    std::vector<int> in_failed(n);
    for (int i = 0; i < n; ++i) in_failed[i] = i;
    failed.resize(n);
    MPI_Group_translate_ranks(failed_group, n, in_failed.data(), comm_group, failed.data());
    MPI_Group_free(&comm_group);
  }
  MPI_Group_free(&failed_group);
#else
  (void)comm;
  (void)rc;
#endif
  return failed;
}

}  // namespace tfring
