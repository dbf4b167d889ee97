#include "tfring/kernels/backends/cuda/producer_stream.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <utility>

#include "tfring/kernels/backends/cuda/cuda_check.h"

namespace tfring {

Status TieToProducerStream(void* stream, int device, std::vector<Entry>* entries) {
  if (entries->empty()) return Status::OK();
  TFRING_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event;
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t rc = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
  if (rc != cudaSuccess) {
    cudaEventDestroy(event);
    return CudaStatus(rc, "cudaEventRecord", __FILE__, __LINE__);
  }
  auto remaining = std::make_shared<std::atomic<int>>(static_cast<int>(entries->size()));
  for (Entry& e : *entries) {
    e.device = device;
    e.request.on_device = true;
    e.stream = stream;
    e.ready_event = event;
    auto done = std::move(e.done);
    e.done = [done, event, remaining](const Status& s) {
      if (done) done(s);
      // Safe even while a stream still waits on it: CUDA frees it after.
      if (remaining->fetch_sub(1) == 1) cudaEventDestroy(event);
    };
  }
  return Status::OK();
}

}  // namespace tfring
