#include "tfring/kernels/tf/adapter.h"

#include <atomic>
#include <memory>
#include <mutex>

namespace tfring {

absl::Status ToTfStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return absl::OkStatus();
    case StatusCode::kInvalidArgument: return absl::InvalidArgumentError(s.message());
    case StatusCode::kFailedPrecondition: return absl::FailedPreconditionError(s.message());
    case StatusCode::kAborted: return absl::AbortedError(s.message());
    case StatusCode::kDeadlineExceeded: return absl::DeadlineExceededError(s.message());
    case StatusCode::kUnavailable: return absl::UnavailableError(s.message());
    case StatusCode::kInternal: return absl::InternalError(s.message());
  }
  return absl::UnknownError(s.message());
}

bool FromTfDataType(tensorflow::DataType tf_dtype, DataType* dtype) {
  switch (tf_dtype) {
    case tensorflow::DT_UINT8: *dtype = DataType::kUInt8; return true;
    case tensorflow::DT_INT8: *dtype = DataType::kInt8; return true;
    case tensorflow::DT_INT32: *dtype = DataType::kInt32; return true;
    case tensorflow::DT_INT64: *dtype = DataType::kInt64; return true;
    case tensorflow::DT_HALF: *dtype = DataType::kFloat16; return true;
    case tensorflow::DT_BFLOAT16: *dtype = DataType::kBFloat16; return true;
    case tensorflow::DT_FLOAT: *dtype = DataType::kFloat32; return true;
    case tensorflow::DT_DOUBLE: *dtype = DataType::kFloat64; return true;
    case tensorflow::DT_BOOL: *dtype = DataType::kBool; return true;
    default: return false;
  }
}

Shape ShapeOf(const tensorflow::Tensor& tensor) {
  Shape shape;
  for (int d = 0; d < tensor.dims(); ++d) shape.push_back(tensor.dim_size(d));
  return shape;
}

const void* DataOf(const tensorflow::Tensor& tensor) { return tensor.tensor_data().data(); }

void* MutableDataOf(tensorflow::Tensor* tensor) {
  return const_cast<char*>(tensor->tensor_data().data());
}

std::function<void(const Status&)> CompletionFor(tensorflow::OpKernelContext* context,
                                                 tensorflow::AsyncOpKernel::DoneCallback done,
                                                 int pending) {
  struct Shared {
    std::atomic<int> remaining;
    std::mutex mutex;
    Status first_error;
  };
  auto shared = std::make_shared<Shared>();
  shared->remaining = pending;
  return [context, done, shared](const Status& s) {
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (shared->first_error.ok()) shared->first_error = s;
    }
    if (--shared->remaining == 0) {
      if (!shared->first_error.ok()) context->SetStatus(ToTfStatus(shared->first_error));
      done();
    }
  };
}

}  // namespace tfring
