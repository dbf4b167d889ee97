// CUDA runtime return codes as Statuses carrying CUDA's own error string.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "tfring/kernels/common/status.h"

namespace tfring {

inline Status CudaStatus(cudaError_t rc, const char* call, const char* file, int line) {
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorName(rc) + ": " +
                          cudaGetErrorString(rc) + " (" + file + ":" + std::to_string(line) + ")");
}

}  // namespace tfring

#define TFRING_CUDA_CHECK(call)                                              \
  do {                                                                       \
    const cudaError_t tfring_cuda_rc_ = (call);                              \
    if (tfring_cuda_rc_ != cudaSuccess) {                                    \
      return ::tfring::CudaStatus(tfring_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)
