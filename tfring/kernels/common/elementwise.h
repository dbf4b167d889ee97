// Element-wise helpers on raw buffers, for every DataType: combining two buffers with a
// reduction (used where MPI has no native op, and by the in-process test backend) and
// scaling (prescale/postscale, Average).
#pragma once

#include <cstdint>

#include "tfring/kernels/common/types.h"

namespace tfring {

// inout[i] = op(inout[i], in[i]) for i < count. `op` must not be kAverage (an Average is
// a Sum followed by a scale).
void ReduceInto(DataType dtype, ReduceOp op, const void* in, void* inout, int64_t count);

// buf[i] *= factor, computed in double (float for 16-bit floats); integers are truncated
// toward zero, as Horovod scales them. Every reducible dtype.
void ScaleInPlace(DataType dtype, double factor, void* buf, int64_t count);
// out[i] = in[i] * factor, as ScaleInPlace computes it; `in` may be `out`. One pass where a
// copy and a scale would take two (a fused tensor's way out of the fusion buffer).
void ScaleInto(DataType dtype, double factor, const void* in, void* out, int64_t count);

// buf[i] = buf[i] / divisor rounded toward zero, in exact integer arithmetic: Average on
// integer tensors (Horovod's rounding, without the error of multiplying by 1/divisor).
void DivideTowardZeroInPlace(DataType dtype, int64_t divisor, void* buf, int64_t count);

// buf[i] = the identity of `op` (0 for Sum and Average, 1 for Product, the type's largest
// value for Min and lowest for Max; infinities for floating point): what a rank that has
// joined contributes to the others' reductions.
void FillIdentity(DataType dtype, ReduceOp op, void* buf, int64_t count);

}  // namespace tfring
