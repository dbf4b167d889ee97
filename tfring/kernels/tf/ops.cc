// Op registrations and shape functions. Kernels are in kernels.cc.
//
// tensor_name pairs an op's tensors across ranks. Empty means an unnamed eager call: the
// kernel names it when it is queued (kernels.cc, OpName), and call_site says where the
// user made the call, for messages. Neither changes from call to call at one call site, so
// TensorFlow reuses the kernel it made for the first call.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfring {
namespace {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status SameShape(InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

}  // namespace

#define TFRING_REDUCIBLE_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double}"
#define TFRING_ALL_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"

REGISTER_OP("TfringAllreduce")
    .Attr("T: " TFRING_REDUCIBLE_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("cacheable: bool = true")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(SameShape)
    .Doc("Reduces `tensor` over all ranks; every rank receives the result.");

REGISTER_OP("TfringGroupedAllreduce")
    .Attr("T: list(" TFRING_REDUCIBLE_TYPES ")")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("cacheable: bool = true")
    .Attr("eager: bool = false")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces every tensor over all ranks, submitted together so they are fused.");

REGISTER_OP("TfringAllgather")
    .Attr("T: " TFRING_ALL_TYPES)
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in, out;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("Concatenates every rank's `tensor` along the first dimension, in rank order.");

REGISTER_OP("TfringReducescatter")
    .Attr("T: " TFRING_REDUCIBLE_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("cacheable: bool = true")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("scattered: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in, out;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("Reduces `tensor` over all ranks; rank r receives its block of the first dimension "
         "(as even as possible, lower ranks taking the remainder).");

REGISTER_OP("TfringAlltoall")
    .Attr("T: " TFRING_ALL_TYPES)
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in, out;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Sends rows splits[r] of `tensor` to each rank r; returns what every rank sent this "
         "rank, in rank order, and how many rows came from each.");

REGISTER_OP("TfringGroupedAllgather")
    .Attr("T: list(" TFRING_ALL_TYPES ")")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("eager: bool = false")
    .Input("tensors: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) {
        ShapeHandle in, out;
        TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
        TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
        c->set_output(i, out);
      }
      return absl::OkStatus();
    })
    .Doc("Allgathers every tensor, submitted together so they are fused.");

REGISTER_OP("TfringBarrier")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("cacheable: bool = true")
    .Attr("eager: bool = false")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Completes once every rank has reached a barrier of the same name.");

REGISTER_OP("TfringBroadcast")
    .Attr("T: " TFRING_ALL_TYPES)
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .Attr("call_site: string = ''")
    .Attr("process_set: list(int) = []")
    .Attr("process_set_world: int = 0")
    .Attr("cacheable: bool = true")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetIsStateful()
    .SetShapeFn(SameShape)
    .Doc("Every rank receives root_rank's `tensor`.");

REGISTER_OP("TfringJoin")
    .Attr("eager: bool = false")
    .Output("last_joined: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This rank has no more data: it takes part in the other ranks' collectives with "
         "the identity of their reduction until every rank has joined; then returns the "
         "last rank to join.");

#define TFRING_LAYOUT_OP(Name, What)                                  \
  REGISTER_OP(Name)                                                   \
      .Output("value: int32")                                         \
      .SetIsStateful()                                                \
      .SetShapeFn(::tensorflow::shape_inference::ScalarShape)         \
      .Doc("The " What " when the graph runs (not when it is built).");

TFRING_LAYOUT_OP("TfringSize", "number of ranks")
TFRING_LAYOUT_OP("TfringRank", "rank of this process")
TFRING_LAYOUT_OP("TfringLocalSize", "number of ranks on this host")
TFRING_LAYOUT_OP("TfringLocalRank", "rank of this process on its host")

}  // namespace tfring
