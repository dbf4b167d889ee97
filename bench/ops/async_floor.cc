// TfringAsyncFloor: what TensorFlow itself charges for an asynchronous op, with none of
// tfring's runtime behind it: it passes its input through as its output and completes at
// once, on the kernel's own thread.
//
// For the benchmarks only (bench/keras_fit.py's "async floor"): put where every allreduce
// of a Keras step would be, it gives the step with TensorFlow's cost of its async ops and
// no communication, so that what tfring and the communication cost is the difference. Not
// part of tfring's API.
//
// It completes inline on purpose: completing each op from a background thread, one `done`
// at a time as ops arrive, would wake that thread and then one of TensorFlow's per op,
// where tfring's runtime completes a burst of ops in one go, and the floor would then be
// above tfring itself (docs/benchmarks.md, 'The async floor').
//
// TfringAsyncBurstFloor completes as tfring's runtime does: its ops wait until `burst` of
// them have come (a step's gradients), and a background thread, under SCHED_BATCH as
// tfring's is, then completes them all in one go. What it costs above TfringAsyncFloor is
// TensorFlow's cost of having its ops completed from another thread (their `done` work,
// the wake-ups), with still no communication and none of tfring's bookkeeping.
#include <sched.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tfring {
namespace {

class AsyncFloorOp : public tensorflow::AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(tensorflow::OpKernelContext* ctx, DoneCallback done) override {
    ctx->set_output(0, ctx->input(0));
    done();
  }
};

// The ops waiting for their burst, and the thread that completes a full one.
class BurstCompleter {
 public:
  static BurstCompleter& Get() {
    static BurstCompleter* completer = new BurstCompleter();  // lives as long as the process
    return *completer;
  }

  void Add(std::function<void()> done, int burst) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_.push_back(std::move(done));
      if (static_cast<int>(waiting_.size()) < burst) return;
      // Appended, not swapped: a burst the thread has not taken yet stays whole.
      for (auto& d : waiting_) ready_.push_back(std::move(d));
      waiting_.clear();
    }
    wake_.notify_one();
  }

 private:
  BurstCompleter() {
    std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
#ifdef __linux__
    sched_param normal_priority{};
    sched_setscheduler(0, SCHED_BATCH, &normal_priority);  // as tfring's runtime thread
#endif
    std::vector<std::function<void()>> burst;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !ready_.empty(); });
        burst.swap(ready_);
      }
      for (auto& done : burst) done();
      burst.clear();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::function<void()>> waiting_;
  std::vector<std::function<void()>> ready_;
};

class AsyncBurstFloorOp : public tensorflow::AsyncOpKernel {
 public:
  explicit AsyncBurstFloorOp(tensorflow::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("burst", &burst_));
  }

  void ComputeAsync(tensorflow::OpKernelContext* ctx, DoneCallback done) override {
    ctx->set_output(0, ctx->input(0));
    BurstCompleter::Get().Add(std::move(done), burst_);
  }

 private:
  int burst_ = 1;
};

REGISTER_OP("TfringAsyncFloor")
    .Attr("T: type")
    .Input("tensor: T")
    .Output("same: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("For benchmarks: passes its input through as an asynchronous op that completes at "
         "once, without tfring's runtime.");

REGISTER_KERNEL_BUILDER(Name("TfringAsyncFloor").Device(tensorflow::DEVICE_CPU), AsyncFloorOp);

REGISTER_OP("TfringAsyncBurstFloor")
    .Attr("T: type")
    .Attr("burst: int >= 1")
    .Input("tensor: T")
    .Output("same: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("For benchmarks: passes its input through as an asynchronous op, completed from a "
         "background thread once `burst` such ops are waiting, without tfring's runtime.");

REGISTER_KERNEL_BUILDER(Name("TfringAsyncBurstFloor").Device(tensorflow::DEVICE_CPU),
                        AsyncBurstFloorOp);

}  // namespace
}  // namespace tfring
