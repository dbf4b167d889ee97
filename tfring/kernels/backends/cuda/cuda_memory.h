// CudaMemory: DeviceMemory over the CUDA runtime, for the staging executor.
//
// Copies run on a stream of its own (non-blocking, so they never serialize with TensorFlow's
// streams through the legacy default stream) and are waited for before they return.
#pragma once

#include <cuda_runtime_api.h>

#include <map>

#include "tfring/kernels/core/device_memory.h"

namespace tfring {

class CudaMemory : public DeviceMemory {
 public:
  CudaMemory() = default;
  ~CudaMemory() override;

  Status WaitForInput(const Entry& e) override;
  Status WaitForStream(const Entry& e) override;
  Status CopyToHost(void* host, const void* device, int64_t bytes, int device_id) override;
  Status CopyToDevice(void* device, const void* host, int64_t bytes, int device_id) override;

 private:
  Status StreamFor(int device_id, cudaStream_t* stream);
  std::map<int, cudaStream_t> streams_;  // per device, created on first use
};

// The CUDA runtime's view of the machine, for skips and errors: "" when at least one device
// is usable, else why not ("no CUDA device visible (cudaGetDeviceCount: ...)").
std::string CudaUnavailableReason();

}  // namespace tfring
