// tfring's collectives inside XLA-compiled functions (tf.function(jit_compile=True), Keras
// jit_compile=True): each op lowers to one custom call that the runtime serves
// (xla_call.h, xla_handler.cc), so a step keeps XLA and its tensors are reduced in XLA's
// own buffers.
//
// Lowered for XLA's CPU device (and, in GPU builds, its GPU device): allreduce and
// grouped_allreduce (what the optimizers use), broadcast, reducescatter, and the
// layout ops (size, rank, local size and rank: constants of the compiled step, read when
// XLA compiles it, after init()). allgather and alltoall have output shapes that depend on
// other ranks, which XLA must know when it compiles; tfring/collectives.py refuses them
// under XLA with a message that names the op.
//
// Registered as kernels of XLA's JIT devices directly (REGISTER_KERNEL_BUILDER), not with
// REGISTER_XLA_OP: the XLA op registry copies its table into the kernel registry once, the
// first time anything is compiled, so an op library loaded after that (a user who compiled
// a function before importing tfring) would never be seen.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/common/types.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/xla/xla_call.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace tfring {
namespace {

using tensorflow::OpKernelConstruction;
using tensorflow::XlaOpKernel;
using tensorflow::XlaOpKernelContext;

// Input i's shape, row-major (the runtime reads buffers in that order: it matters for
// reducescatter's blocks of rows); false (with the context failed) unless it is static.
bool RowMajorShape(XlaOpKernelContext* ctx, int i, const std::string& name, xla::Shape* out) {
  auto shape = ctx->InputXlaShape(i);
  if (!shape.ok()) {
    ctx->CtxFailure(shape.status());
    return false;
  }
  if (!shape->is_static()) {
    ctx->CtxFailure(absl::InvalidArgumentError(
        "tfring under XLA needs tensors of static shape; '" + name + "' has shape " +
        shape->ToString() +
        " (give the function an input_signature of fixed shape, or leave XLA off)"));
    return false;
  }
  *out = xla::ShapeUtil::MakeShapeWithDescendingLayout(shape->element_type(),
                                                       shape->dimensions());
  return true;
}

// One custom call over all of the op's inputs. Output i has input i's shape, or
// `results[i]` when given. With `in_place`, output i may share input i's buffer (XLA copies
// the operand first when it is still needed elsewhere).
void LowerToCall(XlaOpKernelContext* ctx, const xla_call::Attributes& attrs, bool in_place,
                 std::vector<xla::Shape> results = {}) {
  const int n = ctx->num_inputs();
  std::vector<xla::XlaOp> operands;
  std::vector<xla::Shape> shapes(n);
  std::vector<std::pair<xla::ShapeIndex, std::pair<int64_t, xla::ShapeIndex>>> aliasing;
  for (int i = 0; i < n; ++i) {
    if (!RowMajorShape(ctx, i, attrs.name, &shapes[i])) return;
    operands.push_back(ctx->Input(i));
    if (in_place) aliasing.push_back({xla::ShapeIndex{i}, {i, xla::ShapeIndex{}}});
  }
  if (results.empty()) results = shapes;
  const xla::XlaOp call = xla::CustomCallWithLayout(
      ctx->builder(), xla_call::kTarget, operands, xla::ShapeUtil::MakeTupleShape(results),
      shapes, xla_call::Encode(attrs), /*has_side_effect=*/true, aliasing,
      /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  for (int i = 0; i < n; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
}

// The attributes every collective op has; false (with the construction failed) on error.
bool ReadCommon(OpKernelConstruction* c, CollectiveKind kind, xla_call::Attributes* a) {
  a->kind = static_cast<int32_t>(kind);
  absl::Status s = c->GetAttr("tensor_name", &a->name);
  if (s.ok()) s = c->GetAttr("process_set", &a->process_set);
  if (s.ok()) s = c->GetAttr("process_set_world", &a->process_set_world);
  if (!s.ok()) {
    c->CtxFailure(s);
    return false;
  }
  if (a->name.empty()) {  // only unnamed eager calls have no name, and XLA compiles graphs
    c->CtxFailure(absl::InvalidArgumentError(
        "a tfring op without a tensor_name cannot be compiled by XLA (node '" + c->def().name() +
        "'): build it through tfring's Python functions, which name it"));
    return false;
  }
  return true;
}

// ReadCommon, then the attributes of a reducing op (allreduce, reducescatter).
void ReadReducing(OpKernelConstruction* c, CollectiveKind kind, xla_call::Attributes* a) {
  if (!ReadCommon(c, kind, a)) return;
  OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &a->reduce_op));
  OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &a->prescale));
  OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &a->postscale));
  OP_REQUIRES_OK(c, c->GetAttr("cacheable", &a->cacheable));
}

// TfringAllreduce and TfringGroupedAllreduce: one call for all of the op's tensors, so a
// grouped op's tensors are fused as eagerly.
class XlaAllreduceOp : public XlaOpKernel {
 public:
  explicit XlaAllreduceOp(OpKernelConstruction* c) : XlaOpKernel(c) {
    ReadReducing(c, CollectiveKind::kAllreduce, &attrs_);
  }

  void Compile(XlaOpKernelContext* ctx) override {
    if (ctx->num_inputs() == 0) return;
    LowerToCall(ctx, attrs_, /*in_place=*/true);
  }

 private:
  xla_call::Attributes attrs_;
};

class XlaBroadcastOp : public XlaOpKernel {
 public:
  explicit XlaBroadcastOp(OpKernelConstruction* c) : XlaOpKernel(c) {
    if (!ReadCommon(c, CollectiveKind::kBroadcast, &attrs_)) return;
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &attrs_.root_rank));
    OP_REQUIRES_OK(c, c->GetAttr("cacheable", &attrs_.cacheable));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    GlobalRuntime::Running runtime;
    if (GlobalRuntime::Get().Acquire(&runtime)) {  // else the call fails when it runs
      const ProcessLayout& layout = runtime.layout;
      OP_REQUIRES(ctx, attrs_.root_rank >= 0 && attrs_.root_rank < layout.size,
                  absl::InvalidArgumentError(
                      RootRankMessage(attrs_.root_rank, layout.size, attrs_.name)));
    }
    LowerToCall(ctx, attrs_, /*in_place=*/true);
  }

 private:
  xla_call::Attributes attrs_;
};

// TfringReducescatter: this rank's block of rows is known when XLA compiles (the set's size
// and this rank's place in it, after init()).
class XlaReducescatterOp : public XlaOpKernel {
 public:
  explicit XlaReducescatterOp(OpKernelConstruction* c) : XlaOpKernel(c) {
    ReadReducing(c, CollectiveKind::kReducescatter, &attrs_);
  }

  void Compile(XlaOpKernelContext* ctx) override {
    GlobalRuntime::Running runtime;
    OP_REQUIRES(ctx, GlobalRuntime::Get().Acquire(&runtime),
                absl::FailedPreconditionError(
                    NotInitialized("XLA compiles reducescatter '" + attrs_.name + "'")
                        .message()));
    xla::Shape in;
    if (!RowMajorShape(ctx, 0, attrs_.name, &in)) return;
    OP_REQUIRES(ctx, in.dimensions_size() >= 1,
                absl::InvalidArgumentError(ScalarInputMessage("reducescatter", attrs_.name)));
    const ProcessLayout& layout = runtime.layout;
    int size = layout.size, position = layout.rank;
    if (!attrs_.process_set.empty()) {
      const auto& set = attrs_.process_set;
      OP_REQUIRES(ctx, attrs_.process_set_world == GlobalRuntime::Get().process_set_world(),
                  absl::InvalidArgumentError(
                      StaleProcessSetMessage(set, "'" + attrs_.name + "'")));
      const auto it = std::find(set.begin(), set.end(), layout.rank);
      OP_REQUIRES(ctx, it != set.end(),
                  absl::InvalidArgumentError(NotAMemberMessage(layout.rank, set, attrs_.name)));
      size = static_cast<int>(set.size());
      position = static_cast<int>(it - set.begin());
    }
    xla::Shape out = in;
    out.set_dimensions(0, ReducescatterRows(in.dimensions(0), size)[position]);
    LowerToCall(ctx, attrs_, /*in_place=*/false, {out});
  }

 private:
  xla_call::Attributes attrs_;
};

// TfringSize, TfringRank, TfringLocalSize, TfringLocalRank: the value when XLA compiles.
class XlaLayoutOp : public XlaOpKernel {
 public:
  explicit XlaLayoutOp(OpKernelConstruction* c) : XlaOpKernel(c) {}

  void Compile(XlaOpKernelContext* ctx) override {
    GlobalRuntime::Running runtime;
    OP_REQUIRES(ctx, GlobalRuntime::Get().Acquire(&runtime),
                absl::FailedPreconditionError(
                    NotInitialized("XLA compiles a function that uses " + type_string())
                        .message()));
    const ProcessLayout& layout = runtime.layout;
    const std::string& op = type_string();
    const int32_t value = op == "TfringSize"        ? layout.size
                          : op == "TfringRank"      ? layout.rank
                          : op == "TfringLocalSize" ? layout.local_size
                                                    : layout.local_rank;
    ctx->SetOutput(0, xla::ConstantR0<int32_t>(ctx->builder(), value));
  }
};

// Every lowered op, for one of XLA's JIT devices.
#define TFRING_REGISTER_XLA_KERNELS(device)                                                 \
  REGISTER_KERNEL_BUILDER(Name("TfringAllreduce").Device(device), XlaAllreduceOp);          \
  REGISTER_KERNEL_BUILDER(Name("TfringGroupedAllreduce").Device(device), XlaAllreduceOp);   \
  REGISTER_KERNEL_BUILDER(Name("TfringBroadcast").Device(device), XlaBroadcastOp);          \
  REGISTER_KERNEL_BUILDER(Name("TfringReducescatter").Device(device), XlaReducescatterOp);  \
  REGISTER_KERNEL_BUILDER(Name("TfringSize").Device(device), XlaLayoutOp);                  \
  REGISTER_KERNEL_BUILDER(Name("TfringRank").Device(device), XlaLayoutOp);                  \
  REGISTER_KERNEL_BUILDER(Name("TfringLocalSize").Device(device), XlaLayoutOp);             \
  REGISTER_KERNEL_BUILDER(Name("TfringLocalRank").Device(device), XlaLayoutOp)

TFRING_REGISTER_XLA_KERNELS(tensorflow::DEVICE_CPU_XLA_JIT);
#if TFRING_WITH_NCCL
// GPU builds: the same lowerings for XLA's GPU device, served by xla_gpu_handler.cc.
TFRING_REGISTER_XLA_KERNELS(tensorflow::DEVICE_GPU_XLA_JIT);
#endif

}  // namespace
}  // namespace tfring
