// Conversions between TensorFlow and the framework-neutral runtime: statuses, dtypes,
// shapes, and the done callback that completes an async kernel.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"
#include "tfring/kernels/core/op_countdown.h"

namespace tfring {

absl::Status ToTfStatus(const Status& status);
// False when TensorFlow's dtype has no tfring equivalent.
bool FromTfDataType(tensorflow::DataType tf_dtype, DataType* dtype);
Shape ShapeOf(const tensorflow::Tensor& tensor);
const void* DataOf(const tensorflow::Tensor& tensor);
void* MutableDataOf(tensorflow::Tensor* tensor);

// Completes an async kernel once the runtime has finished all of its entries (one, or
// one per tensor of a grouped op), recording the first failure on the kernel's context.
//
// An eager op's caller blocks until the kernel is done, and waking a blocked thread costs
// more than a small collective. So for small eager ops (see kInlineWaitMaxBytes)
// WaitInlineAndRelease lets the calling thread wait (yielding) for a short while and
// complete the kernel itself; if the runtime is slower, the background thread completes it
// as usual. Exactly one of the two calls `done`.
//
// It counts its own references (each pending entry, and the kernel's thread until
// WaitInlineAndRelease) and deletes itself after the last: so each entry's callback holds a
// plain pointer, which std::function keeps without allocating. A graph step makes one of
// these per gradient, and the allocations (freed on another thread) would be a noticeable
// share of tfring's cost per step (docs/benchmarks.md).
class KernelCompletion {
 public:
  // Larger ops gain nothing from waiting inline, and the waiting thread would take CPU
  // time from the transfer when ranks are bound to one core each.
  static constexpr int64_t kInlineWaitMaxBytes = 64 * 1024;

  static KernelCompletion* Create(tensorflow::OpKernelContext* context,
                                  tensorflow::AsyncOpKernel::DoneCallback done, int pending,
                                  bool wait_inline);
  // The callback for each Entry::done (call once per pending entry).
  std::function<void(const Status&)> EntryCallback();
  // The count those callbacks keep: an eager caller that runs cycles reads it
  // (Coordinator::EnqueueAll). Alive until WaitInlineAndRelease at least.
  const OpCountdown& countdown() const { return remaining_; }
  // Called once on the kernel's thread after every entry is queued: waits first if the
  // completion was created with wait_inline. The completion may be gone when it returns.
  void WaitInlineAndRelease();

 private:
  enum : int { kNoWaiter, kWaiting, kHandedToWaiter, kWaiterGaveUp };
  KernelCompletion(tensorflow::OpKernelContext* context,
                   tensorflow::AsyncOpKernel::DoneCallback done, int pending, bool wait_inline);
  void EntryDone(const Status& status);
  void Complete();
  void Unref();

  tensorflow::OpKernelContext* const context_;
  const tensorflow::AsyncOpKernel::DoneCallback done_;
  OpCountdown remaining_;       // entries not done yet
  std::atomic<int> refs_;       // remaining_ + 1 until the kernel's thread lets go
  std::atomic<int> waiter_;
  std::atomic<bool> failed_{false};  // first_error_ is set: read without the lock
  std::mutex mutex_;
  Status first_error_;
};

}  // namespace tfring
