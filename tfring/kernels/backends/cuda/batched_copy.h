// Many device-to-device copies in a few kernel launches: packing a fusion buffer and
// unpacking it. One cudaMemcpyAsync per tensor costs a launch each, and for many small
// tensors the launches take far longer than moving the bytes, so one launch of the batched
// kernel does many copies (figures: BUILD.md, 'GPU (NCCL)').
//
// tfring is built without nvcc, so the kernel ships as PTX (batched_copy_ptx.h, made from
// batched_copy.cu) that the driver compiles when it is loaded. It is loaded through the
// driver API, from libcuda.so.1 opened at run time, so tfring links only the CUDA runtime.
// If any of that fails (an old driver, say), Copy falls back to one cudaMemcpyAsync per
// buffer, slower but the same result, and says so once in the log.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"

namespace tfring {

struct DeviceCopy {
  void* dst;
  const void* src;
  int64_t bytes;
};

class BatchedCopier {
 public:
  // Loads the kernel into the current device's context (call it after cudaSetDevice, on the
  // thread that will copy). With use_kernel false every copy is a cudaMemcpyAsync.
  void Load(bool use_kernel = true);
  bool kernel_loaded() const { return function_ != nullptr; }
  // Why the kernel is not in use ("" when it is).
  const std::string& fallback_reason() const { return fallback_reason_; }

  // Queues the copies on `stream`. The buffers must not overlap each other; the copies run in
  // any order among themselves, after the work queued on `stream` before them.
  Status Copy(const std::vector<DeviceCopy>& copies, cudaStream_t stream);

 private:
  Status Launch(const DeviceCopy* copies, int count, cudaStream_t stream);

  void* function_ = nullptr;  // the kernel (a CUfunction)
  void* launch_ = nullptr;    // cuLaunchKernel
  std::string fallback_reason_ = "not loaded";
};

}  // namespace tfring
