// Turns an MPI return code into a Status with MPI's own error string and our file:line.
#pragma once

#include <mpi.h>

#include <string>

#include "tfring/kernels/common/status.h"

namespace tfring {

Status MpiStatus(int rc, const char* call, const char* file, int line);

}  // namespace tfring

#define TFRING_MPI_CHECK(call)                                                       \
  do {                                                                               \
    int _tfring_rc = (call);                                                         \
    if (_tfring_rc != MPI_SUCCESS) return ::tfring::MpiStatus(_tfring_rc, #call, __FILE__, __LINE__); \
  } while (0)
