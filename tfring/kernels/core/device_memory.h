// DeviceMemory: the few things the runtime needs from a GPU's memory, without naming CUDA:
// wait until an entry's input has been written, and copy between the device and the host.
// backends/cuda/cuda_memory.h implements it with the CUDA runtime; the native tests
// implement it over host memory, so the code that uses it runs without a GPU.
#pragma once

#include <cstdint>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Blocks until the producer of `e`'s input has finished writing it (Entry::ready_event)
  // and any earlier work on its stream that might still use `e`'s output memory is done.
  virtual Status WaitForInput(const Entry& e) = 0;
  // Blocks until work queued so far on `e`'s producer stream (Entry::stream) is done: an
  // output allocated after the op was queued (allgather) may be memory that such work was
  // still using when the framework freed it.
  virtual Status WaitForStream(const Entry& e) = 0;
  // Synchronous copies; on return, the destination holds the bytes.
  virtual Status CopyToHost(void* host, const void* device, int64_t bytes, int device_id) = 0;
  virtual Status CopyToDevice(void* device, const void* host, int64_t bytes, int device_id) = 0;
};

}  // namespace tfring
