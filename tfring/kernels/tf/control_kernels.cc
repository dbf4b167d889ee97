// The TF kernels of the ops without tensor data: barrier, join, and the layout ops (size,
// rank, local size, local rank). Their GPU kernels work in host memory (as TensorFlow's own
// Shape or Size do), so that a TF1 graph placed on a GPU without soft placement finds a
// kernel for every tfring op; they never touch the GPU.
#include <cstdint>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/adapter.h"
#include "tfring/kernels/tf/submit.h"

namespace tfring {
namespace {

// Completes once every rank has submitted a barrier of the same name.
class BarrierOp : public AsyncOpKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : AsyncOpKernel(c), name_(c), set_(c) {
    OP_REQUIRES_OK(c, c->GetAttr("cacheable", &cacheable_));
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    GlobalRuntime::Running runtime;
    if (!AcquireRuntime(ctx, name_.Display(), &runtime)) return done();
    OP_REQUIRES_OK_ASYNC(ctx, set_.Current(name_.Display()), done);
    Entry e;
    e.request.key = name_.Key(0, 1, set_);
    e.request.kind = CollectiveKind::kBarrier;
    e.request.dtype = DataType::kUInt8;
    e.request.cacheable = cacheable_;
    SubmitOne</*kOnGpu=*/false>(ctx, std::move(done), std::move(e), eager_, /*bytes=*/0, name_,
                                &runtime);
  }

 private:
  const OpName name_;
  bool cacheable_;
  bool eager_;
  const ProcessSetAttr set_;
};

// This rank has run out of data (tfring.join): the runtime keeps running the other ranks'
// collectives with it until every rank has joined, then outputs the last rank to join.
class JoinOp : public AsyncOpKernel {
 public:
  explicit JoinOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    GlobalRuntime::Running runtime;
    if (!GlobalRuntime::Get().Acquire(&runtime)) {
      TFRING_FAIL_ASYNC(ctx, ToTfStatus(NotInitialized("join()")), done);
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &output),
                         done);
    Entry e;
    static const SharedName* const kJoin = new SharedName("tfring.join");
    e.request.key.name = *kJoin;
    e.request.kind = CollectiveKind::kJoin;
    e.request.dtype = DataType::kInt32;
    e.request.cacheable = false;
    e.output = output->data();
    // Waits for the slowest rank: never inline on the caller's thread.
    SubmitOne</*kOnGpu=*/false>(ctx, std::move(done), std::move(e), eager_, INT64_MAX,
                                OpName("tfring.join"), &runtime);
  }

 private:
  bool eager_;
};

template <int ProcessLayout::*Field>
class LayoutOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    GlobalRuntime::Running runtime;
    OP_REQUIRES(ctx, GlobalRuntime::Get().Acquire(&runtime),
                ToTfStatus(NotInitialized("running " + name())));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &output));
    output->scalar<int32_t>()() = runtime.layout.*Field;
  }
};

using tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("TfringBarrier").Device(DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("TfringJoin").Device(DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("TfringSize").Device(DEVICE_CPU), LayoutOp<&ProcessLayout::size>);
REGISTER_KERNEL_BUILDER(Name("TfringRank").Device(DEVICE_CPU), LayoutOp<&ProcessLayout::rank>);
REGISTER_KERNEL_BUILDER(Name("TfringLocalSize").Device(DEVICE_CPU),
                        LayoutOp<&ProcessLayout::local_size>);
REGISTER_KERNEL_BUILDER(Name("TfringLocalRank").Device(DEVICE_CPU),
                        LayoutOp<&ProcessLayout::local_rank>);
#if TFRING_WITH_NCCL
// Registered with the other GPU kernels (builds with NCCL), so that a graph on a GPU places
// these beside them.
using tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(Name("TfringBarrier").Device(DEVICE_GPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("TfringJoin").Device(DEVICE_GPU).HostMemory("last_joined"), JoinOp);
REGISTER_KERNEL_BUILDER(Name("TfringSize").Device(DEVICE_GPU).HostMemory("value"),
                        LayoutOp<&ProcessLayout::size>);
REGISTER_KERNEL_BUILDER(Name("TfringRank").Device(DEVICE_GPU).HostMemory("value"),
                        LayoutOp<&ProcessLayout::rank>);
REGISTER_KERNEL_BUILDER(Name("TfringLocalSize").Device(DEVICE_GPU).HostMemory("value"),
                        LayoutOp<&ProcessLayout::local_size>);
REGISTER_KERNEL_BUILDER(Name("TfringLocalRank").Device(DEVICE_GPU).HostMemory("value"),
                        LayoutOp<&ProcessLayout::local_rank>);
#endif

}  // namespace
}  // namespace tfring
