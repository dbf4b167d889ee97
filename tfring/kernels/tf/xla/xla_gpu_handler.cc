// The handler of tfring's XLA custom calls on a GPU (GPU builds): the same entries as on the
// host (xla_handler.cc), tied to XLA's stream the way tf/gpu/gpu_entry.cc ties a TF GPU
// kernel's entries to TensorFlow's: an event recorded on XLA's stream now (after the
// producers of the operands) that the NCCL executor's stream waits for before reading them.
// The call returns once the runtime reports the entries done, which the NCCL executor does
// only after its stream has finished them, so XLA's later work on its stream reads finished
// results.
//
// Not yet run: no machine of this project has had TensorFlow and a GPU together. tfring's
// Python layer keeps XLA off where a GPU is visible unless TFRING_XLA_GPU=1 asks for this
// path (tfring/_xla.py, docs/xla.md).
#include "tfring/kernels/common/build_config.h"

#if TFRING_WITH_NCCL

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "tfring/kernels/tf/xla/xla_call.h"
#include "tfring/kernels/tf/xla/xla_handler.h"
#include "xla/ffi/api/ffi.h"

namespace tfring {
namespace {

namespace ffi = ::xla::ffi;

// Records an event on XLA's stream and hands it to every entry; the last entry's done
// callback frees it.
Status TieToStream(cudaStream_t stream, int32_t device, std::vector<Entry>* entries) {
  TFRING_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event;
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t rc = cudaEventRecord(event, stream);
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
    e.done = [event, remaining](const Status&) {
      if (remaining->fetch_sub(1) == 1) cudaEventDestroy(event);
    };
  }
  return Status::OK();
}

ffi::Error RunOnGpu(cudaStream_t stream, int32_t device, ffi::RemainingArgs args,
                    ffi::RemainingRets rets, ffi::Dictionary attrs) {
  std::vector<Entry> entries;
  ffi::Error made = xla_call::MakeEntries(args, rets, attrs, &entries);
  if (made.failure()) return made;
  if (entries.empty()) return ffi::Error::Success();
  for (const Entry& e : entries) {
    const DataType dtype = e.request.dtype;
    if (dtype == DataType::kUInt16 || dtype == DataType::kInt16) {
      return ffi::Error::InvalidArgument(
          std::string("tfring does not support dtype ") + DataTypeName(dtype) +
          " in GPU memory (NCCL has no 16-bit integers; cast tensor '" + e.request.name +
          "', or place it on the CPU)");
    }
  }
  const Status tied = TieToStream(stream, device, &entries);
  if (!tied.ok()) return ffi::Error::Internal(tied.message());
  return xla_call::SubmitAndWait(std::move(entries));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kRunOnGpu, RunOnGpu,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<cudaStream_t>>()
                           .Ctx<ffi::DeviceOrdinal>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attrs());

XLA_FFI_REGISTER_HANDLER(::xla::ffi::GetXlaFfiApi(), xla_call::kTarget, "CUDA", kRunOnGpu);

}  // namespace tfring

#endif  // TFRING_WITH_NCCL
