#include "tfring/kernels/backends/cuda/cuda_memory.h"

#include "tfring/kernels/backends/cuda/cuda_check.h"

namespace tfring {

CudaMemory::~CudaMemory() {
  for (auto& kv : streams_) cudaStreamDestroy(kv.second);
}

Status CudaMemory::StreamFor(int device_id, cudaStream_t* stream) {
  TFRING_CUDA_CHECK(cudaSetDevice(device_id));
  auto it = streams_.find(device_id);
  if (it == streams_.end()) {
    cudaStream_t s;
    TFRING_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    it = streams_.emplace(device_id, s).first;
  }
  *stream = it->second;
  return Status::OK();
}

Status CudaMemory::WaitForInput(const Entry& e) {
  TFRING_CUDA_CHECK(cudaSetDevice(e.device));
  if (e.ready_event != nullptr) {
    TFRING_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e.ready_event)));
  }
  return Status::OK();
}

Status CudaMemory::WaitForStream(const Entry& e) {
  if (e.stream == nullptr) return Status::OK();
  TFRING_CUDA_CHECK(cudaSetDevice(e.device));
  TFRING_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(e.stream)));
  return Status::OK();
}

Status CudaMemory::CopyToHost(void* host, const void* device, int64_t bytes, int device_id) {
  if (bytes == 0) return Status::OK();
  cudaStream_t stream;
  TFRING_RETURN_IF_ERROR(StreamFor(device_id, &stream));
  TFRING_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
  TFRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::OK();
}

Status CudaMemory::CopyToDevice(void* device, const void* host, int64_t bytes, int device_id) {
  if (bytes == 0) return Status::OK();
  cudaStream_t stream;
  TFRING_RETURN_IF_ERROR(StreamFor(device_id, &stream));
  TFRING_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
  TFRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::OK();
}

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    return std::string("no CUDA device visible (cudaGetDeviceCount: ") + cudaGetErrorName(rc) +
           ": " + cudaGetErrorString(rc) + ")";
  }
  if (count == 0) return "no CUDA device visible (cudaGetDeviceCount: 0 devices)";
  return "";
}

}  // namespace tfring
