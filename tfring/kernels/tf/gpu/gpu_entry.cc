#include "tfring/kernels/tf/gpu/gpu_entry.h"

#include <string>

#include "tfring/kernels/backends/cuda/producer_stream.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace tfring {

Status AttachToGpuStream(tensorflow::OpKernelContext* ctx, std::vector<Entry>* entries) {
  if (entries->empty()) return Status::OK();
  tensorflow::DeviceContext* dc = ctx->op_device_context();
  stream_executor::Stream* stream = dc != nullptr ? dc->stream() : nullptr;
  void* handle = stream != nullptr ? stream->platform_specific_handle().stream : nullptr;
  if (handle == nullptr) {
    return Status::Internal("tfring op '" + KeyString(entries->front().request.key) + "' runs on " +
                            ctx->device()->name() + " but TensorFlow gave it no CUDA stream");
  }
  return TieToProducerStream(handle, stream->parent()->device_ordinal(), entries);
}

}  // namespace tfring
