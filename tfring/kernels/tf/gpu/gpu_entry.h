// The GPU half of the TF glue (GPU builds only), kept to what only TensorFlow can say: which
// CUDA stream and device TensorFlow runs the op's kernel on. What is done with them (an
// event the runtime waits for) is backends/cuda/producer_stream.h, which the native GPU
// tests run.
#pragma once

#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

// Ties the op's entries (their done callbacks set) to TensorFlow's compute stream of the
// op's GPU (TieToProducerStream). On error, leaves the entries unchanged.
Status AttachToGpuStream(tensorflow::OpKernelContext* ctx, std::vector<Entry>* entries);

}  // namespace tfring
