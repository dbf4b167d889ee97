// The handler of tfring's XLA custom calls on a GPU (GPU builds): the same entries as on the
// host (xla_handler.cc), tied to XLA's stream as a TF GPU kernel's entries are tied to
// TensorFlow's (backends/cuda/producer_stream.h): an event recorded on XLA's stream now
// (after the producers of the operands) that the NCCL executor's stream waits for before
// reading them.
// The call returns once the runtime reports the entries done, which the NCCL executor does
// only after its stream has finished them, so XLA's later work on its stream reads finished
// results.
//
// Not yet run: no machine of this project has had TensorFlow and a GPU together. tfring's
// Python layer keeps XLA off where a GPU is visible unless TFRING_XLA_GPU=1 asks for this
// path (tfring/_ops/xla.py, docs/xla.md).
#include "tfring/kernels/common/build_config.h"

#if TFRING_WITH_NCCL

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "tfring/kernels/backends/cuda/producer_stream.h"
#include "tfring/kernels/tf/xla/xla_call.h"
#include "tfring/kernels/tf/xla/xla_handler.h"
#include "xla/ffi/api/ffi.h"

namespace tfring {
namespace {

namespace ffi = ::xla::ffi;

ffi::Error RunOnGpu(cudaStream_t stream, int32_t device, ffi::RemainingArgs args,
                    ffi::RemainingRets rets, ffi::Dictionary attrs) {
  std::vector<Entry> entries;
  ffi::Error made = xla_call::MakeEntries(args, rets, attrs, &entries);
  if (made.failure()) return made;
  if (entries.empty()) return ffi::Error::Success();
  for (const Entry& e : entries) {
    const DataType dtype = e.request.dtype;
    if (dtype == DataType::kUInt16 || dtype == DataType::kInt16) {
      return ffi::Error::InvalidArgument(GpuInt16Message(DataTypeName(dtype), e.request.name));
    }
  }
  const Status tied = TieToProducerStream(stream, device, &entries);
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
