// The TF kernels: check the input, allocate the output, hand an Entry to the runtime, return.
// Completion (and any error, with the same text on every rank) arrives through `done` on
// the runtime's background thread, or, for eager ops that finish quickly, on the caller's
// (KernelCompletion in adapter.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/adapter.h"
#include "tfring/kernels/tf/submit.h"

namespace tfring {
namespace {

// The attributes of a reducing op (allreduce, grouped allreduce, reducescatter), and the
// request fields they fill.
struct ReduceAttrs {
  int reduce_op;
  float prescale, postscale;
  OpName name;
  bool cacheable, eager;
  ProcessSetAttr set;

  explicit ReduceAttrs(OpKernelConstruction* c) : name(c), set(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale));
    OP_REQUIRES_OK(c, c->GetAttr("cacheable", &cacheable));
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager));
    OP_REQUIRES(c, IsValidReduceOp(reduce_op),
                absl::InvalidArgumentError("invalid reduce op " + std::to_string(reduce_op)));
  }

  // Fills the reduction fields of `r` (its key and dtype set). Scale factors apply to
  // integer tensors too, in double and truncated toward zero, as Horovod.
  absl::Status Fill(CollectiveKind kind, Request* r) const {
    r->kind = kind;
    r->reduce_op = static_cast<ReduceOp>(reduce_op);
    r->prescale_factor = prescale;
    r->postscale_factor = postscale;
    r->cacheable = cacheable;
    return absl::OkStatus();
  }
};

// Entry::allocate_output for output `index` of the kernel, allocated once its shape is known.
std::function<Status(const Shape&, void**)> OutputAllocator(OpKernelContext* ctx, int index,
                                                            const char* what) {
  return [ctx, index, what](const Shape& shape, void** buffer) -> Status {
    tensorflow::TensorShape tf_shape;
    for (int64_t d : shape) tf_shape.AddDim(d);
    Tensor* output = nullptr;
    const absl::Status s = ctx->allocate_output(index, tf_shape, &output);
    if (!s.ok()) {
      return Status::Internal(std::string("allocating the ") + what + " output: " + s.ToString());
    }
    *buffer = MutableDataOf(output);
    return Status::OK();
  };
}

// A grouped allreduce of host tensors travels as one unit (Signature::parts): its kernel
// packs the tensors here into one buffer laid out by PlanParts, whose slices are the op's
// outputs, and submits that buffer as one entry, reduced in place. The runtime's work per
// step is then per op, not per tensor (for many small tensors that work costs more than
// the collective); the copy in is the one a fused group makes anyway. As with TensorFlow's own
// split, an output kept alive keeps the whole buffer alive.
absl::Status PackUnit(OpKernelContext* ctx, Entry* unit) {
  const int n = ctx->num_inputs();
  Request& request = unit->request;
  request.parts.resize(n);
  for (int i = 0; i < n; ++i) {  // each dtype was checked (CheckDtype)
    FromTfDataType(ctx->input(i).dtype(), &request.parts[i].dtype);
    request.parts[i].shape = ShapeOf(ctx->input(i));
  }
  const Packed packed = DescribeUnit(&request);
  Tensor region;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8,
                                        tensorflow::TensorShape({packed.total_bytes}), &region));
  char* base = static_cast<char*>(MutableDataOf(&region));
  std::vector<const void*> inputs(n);
  for (int i = 0; i < n; ++i) inputs[i] = DataOf(ctx->input(i));
  PackInto(packed, inputs, base);
  for (int i = 0; i < n; ++i) {
    const Tensor& input = ctx->input(i);
    Tensor output;
    TF_RETURN_IF_ERROR(output.BitcastFrom(
        region.Slice(packed.offsets[i], packed.offsets[i] + packed.bytes[i]), input.dtype(),
        input.shape()));
    ctx->set_output(i, output);
  }
  unit->input = base;
  unit->output = base;
  return absl::OkStatus();
}

template <bool kOnGpu>
class AllreduceOp : public AsyncOpKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c), attrs_(c) {
    // Each tensor's name is the same on every run: made once, not per tensor per step.
    const int n = c->num_inputs();
    display_name_ = attrs_.name.Display();
    names_.reserve(n);
    keys_.reserve(n);
    for (int i = 0; i < n; ++i) {
      names_.push_back(attrs_.name.Display(i, n));
      keys_.push_back(attrs_.name.Key(i, n, attrs_.set));
    }
    unit_key_ = attrs_.name.Key(0, 1, attrs_.set);
    tickets_ = std::make_unique<CacheTicket[]>(n);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    if (n == 0) return done();
    // Made in place: each reads the clock (Entry::created), which costs less than copying
    // an entry made first (three std::functions) once per tensor per step.
    const bool unit = !kOnGpu && n > 1;
    std::vector<Entry> entries(unit ? 1 : n);
    GlobalRuntime::Running runtime;
    if (!AcquireRuntime(ctx, display_name_, &runtime)) return done();
    OP_REQUIRES_OK_ASYNC(ctx, attrs_.set.Current(display_name_), done);
    int64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      DataType dtype;
      if (!CheckDtype<kOnGpu>(ctx, names_[i], input, &dtype)) return done();
      bytes += input.TotalBytes();
      if (unit) continue;
      Entry& e = entries[i];
      e.request.key = keys_[i];
      e.request.dtype = dtype;
      e.request.shape = ShapeOf(input);
      e.input = DataOf(input);
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      if (unit) e.request.key = unit_key_;
      // A ticket serves one name (entry.h): an unnamed eager call is named when queued.
      if (!attrs_.name.unnamed()) e.cache_ticket = &tickets_[i];
      OP_REQUIRES_OK_ASYNC(ctx, attrs_.Fill(CollectiveKind::kAllreduce, &e.request), done);
    }
    if (unit) {
      OP_REQUIRES_OK_ASYNC(ctx, PackUnit(ctx, &entries[0]), done);
    } else {
      for (int i = 0; i < n; ++i) {
        // When nothing else holds the input (a gradient inside a step, say), reduce in
        // place: MPI then works on memory the producer just wrote, not a fresh buffer.
        Tensor* output = nullptr;
        OP_REQUIRES_OK_ASYNC(ctx,
                             ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(),
                                                                   &output),
                             done);
        entries[i].output = MutableDataOf(output);
      }
    }
    SubmitAll<kOnGpu>(ctx, std::move(done), std::move(entries), attrs_.eager, bytes,
                      attrs_.name, &runtime);
  }

 private:
  const ReduceAttrs attrs_;
  std::string display_name_;        // the op's, as messages say it; a grouped op's unit's
  std::vector<std::string> names_;  // each tensor's, as messages say it
  std::vector<TensorKey> keys_;     // each tensor's
  TensorKey unit_key_;              // a grouped op's unit's
  // Where each tensor sat in the response cache last time (entry.h); lives with the kernel.
  std::unique_ptr<CacheTicket[]> tickets_;
};

template <bool kOnGpu>
class AllgatherOp : public AsyncOpKernel {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : AsyncOpKernel(c), name_(c), set_(c) {
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    std::vector<Entry> entries(n);
    GlobalRuntime::Running runtime;
    if (!AcquireRuntime(ctx, name_.Display(), &runtime)) return done();
    OP_REQUIRES_OK_ASYNC(ctx, set_.Current(name_.Display()), done);
    int64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      Entry& e = entries[i];
      e.request.key = name_.Key(i, n, set_);
      e.request.name = name_.Display(i, n);  // for messages until it is queued
      if (!CheckDtype<kOnGpu>(ctx, e.request.name, input, &e.request.dtype)) return done();
      if (input.dims() == 0) {
        TFRING_FAIL_ASYNC(ctx,
                          absl::InvalidArgumentError(
                              ScalarInputMessage("allgather", e.request.name)),
                          done);
      }
      e.request.kind = CollectiveKind::kAllgather;
      e.request.shape = ShapeOf(input);
      e.request.cacheable = false;
      e.input = DataOf(input);
      e.allocate_output = OutputAllocator(ctx, i, "allgather");
      bytes += input.TotalBytes();
    }
    if (n == 0) return done();
    SubmitAll<kOnGpu>(ctx, std::move(done), std::move(entries), eager_, bytes, name_, &runtime);
  }

 private:
  const OpName name_;
  bool eager_;
  const ProcessSetAttr set_;
};

template <bool kOnGpu>
class BroadcastOp : public AsyncOpKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : AsyncOpKernel(c), name_(c), set_(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("cacheable", &cacheable_));
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Entry e;
    e.request.key = name_.Key(0, 1, set_);
    e.request.name = name_.Display();  // for messages until it is queued
    GlobalRuntime::Running runtime;
    if (!CheckCommon<kOnGpu>(ctx, e.request.name, input, &e.request.dtype, &runtime)) {
      return done();
    }
    OP_REQUIRES_OK_ASYNC(ctx, set_.Current(e.request.name), done);
    const ProcessLayout& layout = runtime.layout;
    if (root_rank_ < 0 || root_rank_ >= layout.size) {
      TFRING_FAIL_ASYNC(ctx,
                        absl::InvalidArgumentError(
                            RootRankMessage(root_rank_, layout.size, e.request.name)),
                        done);
    }
    e.request.kind = CollectiveKind::kBroadcast;
    e.request.root_rank = root_rank_;
    e.request.shape = ShapeOf(input);
    e.request.cacheable = cacheable_;
    e.input = DataOf(input);
    if (layout.rank == root_rank_) {
      ctx->set_output(0, input);  // the root's result is its input: share the buffer
      e.output = const_cast<void*>(e.input);
    } else {
      Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, input.shape(), &output), done);
      e.output = MutableDataOf(output);
    }
    SubmitOne<kOnGpu>(ctx, std::move(done), std::move(e), eager_, input.TotalBytes(), name_,
                      &runtime);
  }

 private:
  int root_rank_;
  const OpName name_;
  bool cacheable_;
  bool eager_;
  const ProcessSetAttr set_;
};

template <bool kOnGpu>
class ReducescatterOp : public AsyncOpKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : AsyncOpKernel(c), attrs_(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Entry e;
    e.request.key = attrs_.name.Key(0, 1, attrs_.set);
    e.request.name = attrs_.name.Display();  // for messages until it is queued
    GlobalRuntime::Running runtime;
    if (!CheckCommon<kOnGpu>(ctx, e.request.name, input, &e.request.dtype, &runtime)) {
      return done();
    }
    if (input.dims() == 0) {
      TFRING_FAIL_ASYNC(ctx,
                        absl::InvalidArgumentError(
                            ScalarInputMessage("reducescatter", e.request.name)),
                        done);
    }
    OP_REQUIRES_OK_ASYNC(ctx, attrs_.Fill(CollectiveKind::kReducescatter, &e.request), done);
    e.request.shape = ShapeOf(input);
    int set_size = 0, position = 0;
    OP_REQUIRES_OK_ASYNC(ctx, attrs_.set.View(runtime.layout, e.request.name, &set_size,
                                              &position),
                         done);
    tensorflow::TensorShape out_shape = input.shape();
    out_shape.set_dim(0, ReducescatterRows(input.dim_size(0), set_size)[position]);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, out_shape, &output), done);
    e.input = DataOf(input);
    e.output = MutableDataOf(output);
    SubmitOne<kOnGpu>(ctx, std::move(done), std::move(e), attrs_.eager, input.TotalBytes(),
                      attrs_.name, &runtime);
  }

 private:
  const ReduceAttrs attrs_;
};

template <bool kOnGpu>
class AlltoallOp : public AsyncOpKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : AsyncOpKernel(c), op_name_(c), set_(c) {
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    Entry e;
    const std::string name = op_name_.Display();
    e.request.key = op_name_.Key(0, 1, set_);
    GlobalRuntime::Running runtime;
    if (!CheckCommon<kOnGpu>(ctx, name, input, &e.request.dtype, &runtime)) return done();
    int set_size = 0, position = 0;
    OP_REQUIRES_OK_ASYNC(ctx, set_.View(runtime.layout, name, &set_size, &position), done);
    std::string problem;
    if (input.dims() == 0) {
      problem = ScalarInputMessage("alltoall", name);
    } else if (splits.dims() != 1 || splits.NumElements() != set_size) {
      problem = "alltoall '" + name + "': splits must be a vector of one row count per rank (" +
                std::to_string(set_size) + "); got shape " + splits.shape().DebugString();
    } else {
      int64_t sum = 0;
      for (int r = 0; r < set_size; ++r) {
        const int64_t n = splits.vec<int64_t>()(r);
        if (n < 0) problem = "alltoall '" + name + "': splits must not be negative";
        sum += n;
        e.request.splits.push_back(n);
      }
      if (problem.empty() && sum != input.dim_size(0)) {
        problem = "alltoall '" + name + "': splits add up to " + std::to_string(sum) +
                  " rows but the tensor has " + std::to_string(input.dim_size(0));
      }
    }
    if (!problem.empty()) TFRING_FAIL_ASYNC(ctx, absl::InvalidArgumentError(problem), done);
    e.request.kind = CollectiveKind::kAlltoall;
    e.request.shape = ShapeOf(input);
    e.request.cacheable = false;
    e.input = DataOf(input);
    e.set_received_splits = [ctx](const std::vector<int64_t>& received) -> Status {
      Tensor* out = nullptr;
      const absl::Status s = ctx->allocate_output(
          1, tensorflow::TensorShape({static_cast<int64_t>(received.size())}), &out);
      if (!s.ok()) return Status::Internal("allocating received_splits: " + s.ToString());
      for (size_t r = 0; r < received.size(); ++r) out->vec<int64_t>()(r) = received[r];
      return Status::OK();
    };
    e.allocate_output = OutputAllocator(ctx, 0, "alltoall");
    SubmitOne<kOnGpu>(ctx, std::move(done), std::move(e), eager_, input.TotalBytes(),
                      op_name_, &runtime);
  }

 private:
  const OpName op_name_;
  bool eager_;
  const ProcessSetAttr set_;
};

using tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("TfringAllreduce").Device(DEVICE_CPU), AllreduceOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringGroupedAllreduce").Device(DEVICE_CPU), AllreduceOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringAllgather").Device(DEVICE_CPU), AllgatherOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringGroupedAllgather").Device(DEVICE_CPU), AllgatherOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringReducescatter").Device(DEVICE_CPU), ReducescatterOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringAlltoall").Device(DEVICE_CPU), AlltoallOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfringBroadcast").Device(DEVICE_CPU), BroadcastOp<false>);
#if TFRING_WITH_NCCL
// Builds without NCCL register no GPU kernels: TensorFlow then runs these ops on the CPU
// and copies GPU tensors to the host and back around them. The data ops' GPU kernels take
// only the dtypes NCCL has (no 16-bit integers): TensorFlow places int16/uint16 tensors'
// ops on the CPU kernel instead of picking a GPU kernel that would refuse them.
using tensorflow::DEVICE_GPU;
#define TFRING_GPU_DATA_KERNEL(op, types, ...) \
  REGISTER_KERNEL_BUILDER(Name(op).Device(DEVICE_GPU).TypeConstraint("T", types), __VA_ARGS__)
const std::vector<tensorflow::DataType> kNcclReducible = {
    tensorflow::DT_UINT8, tensorflow::DT_INT8,     tensorflow::DT_INT32, tensorflow::DT_INT64,
    tensorflow::DT_HALF,  tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE};
const std::vector<tensorflow::DataType> kNcclAll = {
    tensorflow::DT_UINT8, tensorflow::DT_INT8,     tensorflow::DT_INT32, tensorflow::DT_INT64,
    tensorflow::DT_HALF,  tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE,
    tensorflow::DT_BOOL};
TFRING_GPU_DATA_KERNEL("TfringAllreduce", kNcclReducible, AllreduceOp<true>);
TFRING_GPU_DATA_KERNEL("TfringGroupedAllreduce", kNcclReducible, AllreduceOp<true>);
TFRING_GPU_DATA_KERNEL("TfringAllgather", kNcclAll, AllgatherOp<true>);
TFRING_GPU_DATA_KERNEL("TfringGroupedAllgather", kNcclAll, AllgatherOp<true>);
TFRING_GPU_DATA_KERNEL("TfringReducescatter", kNcclReducible, ReducescatterOp<true>);
REGISTER_KERNEL_BUILDER(Name("TfringAlltoall")
                            .Device(DEVICE_GPU)
                            .TypeConstraint("T", kNcclAll)
                            .HostMemory("splits")
                            .HostMemory("received_splits"),
                        AlltoallOp<true>);
TFRING_GPU_DATA_KERNEL("TfringBroadcast", kNcclAll, BroadcastOp<true>);
#undef TFRING_GPU_DATA_KERNEL
#endif

}  // namespace
}  // namespace tfring
