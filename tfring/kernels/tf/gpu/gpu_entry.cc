#include "tfring/kernels/tf/gpu/gpu_entry.h"

#include <cuda_runtime_api.h>

#include <string>

#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace tfring {

Status AttachToGpuStream(tensorflow::OpKernelContext* ctx, Entry* e) {
  tensorflow::DeviceContext* dc = ctx->op_device_context();
  stream_executor::Stream* stream = dc != nullptr ? dc->stream() : nullptr;
  void* handle = stream != nullptr ? stream->platform_specific_handle().stream : nullptr;
  if (handle == nullptr) {
    return Status::Internal("tfring op '" + e->request.name + "' runs on " + ctx->device()->name() +
                            " but TensorFlow gave it no CUDA stream");
  }
  const int device = stream->parent()->device_ordinal();
  TFRING_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event;
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t rc = cudaEventRecord(event, static_cast<cudaStream_t>(handle));
  if (rc != cudaSuccess) {
    cudaEventDestroy(event);
    return CudaStatus(rc, "cudaEventRecord", __FILE__, __LINE__);
  }
  e->device = device;
  e->request.on_device = true;
  e->stream = handle;
  e->ready_event = event;
  auto done = std::move(e->done);
  e->done = [done, event](const Status& s) {
    cudaEventDestroy(event);  // safe while a stream still waits on it: freed after
    done(s);
  };
  return Status::OK();
}

}  // namespace tfring
