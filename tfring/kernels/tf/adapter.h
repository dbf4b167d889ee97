// Conversions between TensorFlow and the framework-neutral runtime: statuses, dtypes,
// shapes, and the done callback that completes an async kernel.
#pragma once

#include <functional>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"

namespace tfring {

absl::Status ToTfStatus(const Status& status);
// False when TensorFlow's dtype has no tfring equivalent.
bool FromTfDataType(tensorflow::DataType tf_dtype, DataType* dtype);
Shape ShapeOf(const tensorflow::Tensor& tensor);
const void* DataOf(const tensorflow::Tensor& tensor);
void* MutableDataOf(tensorflow::Tensor* tensor);

// A done callback for runtime entries: records a failure on the kernel context, then
// completes the kernel. `pending` > 1 waits for that many calls (grouped ops).
std::function<void(const Status&)> CompletionFor(tensorflow::OpKernelContext* context,
                                                 tensorflow::AsyncOpKernel::DoneCallback done,
                                                 int pending = 1);

}  // namespace tfring
