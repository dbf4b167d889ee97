#include "tfring/kernels/tf/adapter.h"

#include <sched.h>

#include <atomic>
#include <chrono>
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
    case tensorflow::DT_UINT16: *dtype = DataType::kUInt16; return true;
    case tensorflow::DT_INT16: *dtype = DataType::kInt16; return true;
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
  Shape shape(tensor.dims());  // one allocation, not one per doubling
  for (int d = 0; d < tensor.dims(); ++d) shape[d] = tensor.dim_size(d);
  return shape;
}

const void* DataOf(const tensorflow::Tensor& tensor) { return tensor.tensor_data().data(); }

void* MutableDataOf(tensorflow::Tensor* tensor) {
  return const_cast<char*>(tensor->tensor_data().data());
}

namespace {
// How long an eager caller waits on its own thread before it leaves completion to the
// background thread. Small collectives finish well within it; longer ones do not notice
// the extra wake-up.
constexpr auto kInlineWait = std::chrono::microseconds(300);
}  // namespace

KernelCompletion::KernelCompletion(tensorflow::OpKernelContext* context,
                                   tensorflow::AsyncOpKernel::DoneCallback done, int pending,
                                   bool wait_inline)
    : context_(context),
      done_(std::move(done)),
      remaining_(pending),
      refs_(pending + 1),
      waiter_(wait_inline ? kWaiting : kNoWaiter) {}

KernelCompletion* KernelCompletion::Create(tensorflow::OpKernelContext* context,
                                           tensorflow::AsyncOpKernel::DoneCallback done,
                                           int pending, bool wait_inline) {
  return new KernelCompletion(context, std::move(done), pending, wait_inline);
}

std::function<void(const Status&)> KernelCompletion::EntryCallback() {
  return [this](const Status& s) { EntryDone(s); };
}

void KernelCompletion::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void KernelCompletion::EntryDone(const Status& s) {
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_error_.ok()) first_error_ = s;
    failed_.store(true, std::memory_order_release);
  }
  if (remaining_.CountDown()) {
    int expected = kWaiting;
    // Unless the kernel's thread is waiting, and completes it.
    if (!waiter_.compare_exchange_strong(expected, kHandedToWaiter,
                                         std::memory_order_acq_rel)) {
      Complete();
    }
  }
  Unref();
}

void KernelCompletion::WaitInlineAndRelease() {
  if (waiter_.load(std::memory_order_acquire) != kNoWaiter) {
    const auto deadline = std::chrono::steady_clock::now() + kInlineWait;
    while (waiter_.load(std::memory_order_acquire) != kHandedToWaiter &&
           std::chrono::steady_clock::now() < deadline) {
      sched_yield();
    }
    int expected = kWaiting;
    // Unless too slow: then the background thread completes it.
    if (!waiter_.compare_exchange_strong(expected, kWaiterGaveUp, std::memory_order_acq_rel)) {
      Complete();  // handed to us
    }
  }
  Unref();
}

void KernelCompletion::Complete() {
  // Every entry is done (the last one's fetch_sub ordered their errors before this).
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mutex_);
    context_->SetStatus(ToTfStatus(first_error_));
  }
  done_();
}

}  // namespace tfring
