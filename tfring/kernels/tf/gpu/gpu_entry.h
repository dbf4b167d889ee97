// The GPU half of the TF glue (GPU builds only): ties an Entry to the stream TensorFlow runs
// the op's kernel on, so that the runtime reads the input only after its producer wrote it.
#pragma once

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

// Sets e->device (the CUDA ordinal of the op's GPU), e->stream (TF's compute stream) and
// e->ready_event: an event recorded on that stream now, after the producers of the input
// and any earlier users of the output memory were queued. Wraps e->done (set it first) so
// the event is freed when the op completes. On error, leaves `e` unchanged.
Status AttachToGpuStream(tensorflow::OpKernelContext* ctx, Entry* e);

}  // namespace tfring
