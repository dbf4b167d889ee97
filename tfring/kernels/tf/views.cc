// TfringViews: pieces of a flat tensor, shaped, that share its memory (no copy).
//
// Sharded optimizer state (tfring/_training/sharded_state.py) gathers the updated weights into one
// flat buffer and hands each variable its piece. TensorFlow's own split shares the buffer
// only when every piece both starts and ends 64-byte aligned, so a variable of 1,000
// float32 (4,000 bytes) makes it copy every weight. The buffer's layout starts every piece
// aligned (the padding between pieces is never read), which is all that Eigen's aligned
// loads need: a piece may end anywhere.
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tfring/kernels/common/build_config.h"

namespace tfring {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfringViews")
    .Attr("T: type")
    .Attr("offsets: list(int)")
    .Attr("shapes: list(shape)")
    .Attr("N: int >= 1")
    .Input("flat: T")
    .Output("views: N * T")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("shapes", &shapes));
      for (size_t i = 0; i < shapes.size(); ++i) {
        ShapeHandle out;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &out));
        c->set_output(static_cast<int>(i), out);
      }
      return absl::OkStatus();
    })
    .Doc("Output i: the elements of the 1-D `flat` from offsets[i], shaped shapes[i], "
         "sharing flat's memory. Each offset must be 64-byte aligned.");

class ViewsOp : public OpKernel {
 public:
  explicit ViewsOp(OpKernelConstruction* c) : OpKernel(c) {
    std::vector<PartialTensorShape> shapes;
    OP_REQUIRES_OK(c, c->GetAttr("offsets", &offsets_));
    OP_REQUIRES_OK(c, c->GetAttr("shapes", &shapes));
    OP_REQUIRES(c, offsets_.size() == shapes.size(),
                absl::InvalidArgumentError("TfringViews: one offset per shape"));
    for (const PartialTensorShape& s : shapes) {
      TensorShape shape;
      OP_REQUIRES(c, s.AsTensorShape(&shape),
                  absl::InvalidArgumentError("TfringViews: shapes must be fully defined"));
      shapes_.push_back(shape);
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& flat = ctx->input(0);
    OP_REQUIRES(ctx, flat.dims() == 1,
                absl::InvalidArgumentError("TfringViews: `flat` must be 1-D"));
    const int64_t total = flat.dim_size(0);
    const int64_t esize = tensorflow::DataTypeSize(flat.dtype());
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const int64_t start = offsets_[i], n = shapes_[i].num_elements();
      OP_REQUIRES(ctx, start >= 0 && start + n <= total,
                  absl::InvalidArgumentError(
                      "TfringViews: piece " + std::to_string(i) + " (" + std::to_string(n) +
                      " elements from " + std::to_string(start) + ") lies outside the " +
                      std::to_string(total) + " elements of `flat`"));
      OP_REQUIRES(ctx, (start * esize) % kAlignBytes == 0,
                  absl::InvalidArgumentError("TfringViews: piece " + std::to_string(i) +
                                             " does not start 64-byte aligned"));
      Tensor view;
      // Slice shares flat's buffer; CopyFrom shares it again under the piece's shape.
      OP_REQUIRES(ctx, view.CopyFrom(flat.Slice(start, start + n), shapes_[i]),
                  absl::InternalError("TfringViews: reshaping a piece failed"));
      ctx->set_output(static_cast<int>(i), view);
    }
  }

 private:
  static constexpr int64_t kAlignBytes = 64;
  std::vector<int64_t> offsets_;
  std::vector<TensorShape> shapes_;
};

REGISTER_KERNEL_BUILDER(Name("TfringViews").Device(tensorflow::DEVICE_CPU), ViewsOp);
#if TFRING_WITH_NCCL
// On a GPU the pieces are views of device memory just the same.
REGISTER_KERNEL_BUILDER(Name("TfringViews").Device(tensorflow::DEVICE_GPU), ViewsOp);
#endif

}  // namespace
}  // namespace tfring
