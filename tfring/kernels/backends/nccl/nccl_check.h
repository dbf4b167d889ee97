// NCCL return codes as Statuses carrying NCCL's own error string (and, where the
// communicator is known, its last error message, which names the failing peer or call).
#pragma once

#include <nccl.h>

#include <string>

#include "tfring/kernels/common/status.h"

namespace tfring {

inline Status NcclStatus(ncclResult_t rc, ncclComm_t comm, const char* call, const char* file,
                         int line) {
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(rc);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  return Status::Internal(message + " [" + file + ":" + std::to_string(line) + "]");
}

}  // namespace tfring
