// TfringAsyncFloor: what TensorFlow itself charges for an asynchronous op, with none of
// tfring's runtime behind it: it passes its input through as its output and completes at
// once, on the kernel's own thread.
//
// For the benchmarks only (bench/keras_fit.py's "async floor"): put where every allreduce
// of a Keras step would be, it gives the step with TensorFlow's cost of its async ops and
// no communication, so that what tfring and the communication cost is the difference. Not
// part of tfring's API.
//
// It completes inline on purpose. A version that completed each op from a background
// thread, one `done` at a time as ops arrived, cost the "comm" model's step 5.1 ms against
// tfring's 3.7 (docs/benchmarks.md): each completion woke that thread and then one of
// TensorFlow's, where tfring's runtime completes a burst of ops in one go.
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

REGISTER_OP("TfringAsyncFloor")
    .Attr("T: type")
    .Input("tensor: T")
    .Output("same: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("For benchmarks: passes its input through as an asynchronous op that completes at "
         "once, without tfring's runtime.");

REGISTER_KERNEL_BUILDER(Name("TfringAsyncFloor").Device(tensorflow::DEVICE_CPU), AsyncFloorOp);

}  // namespace
}  // namespace tfring
