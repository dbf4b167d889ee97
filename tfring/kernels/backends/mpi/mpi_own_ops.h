// The MPI datatypes and reduction ops that tfring defines itself, where MPI has none or
// where MPI's own may give a different result than TensorFlow's arithmetic:
// - float16 and bfloat16, which MPI does not have: each element is widened to float,
//   combined, and rounded back (round to nearest even).
// - Sum and Product of every integer dtype, which must wrap modulo 2^bits as TensorFlow's
//   integer arithmetic does. MPI does not promise that: Open MPI 5's AVX op component
//   saturates 8- and 16-bit sums (int8 100 + 100 gives 127, not -56), and another MPI or
//   another MCA setting may do the same for other widths. Our own op is the same wherever
//   the job runs, at a cost that matters little (integer tensors are small counters and
//   labels; gradients are floating point and keep MPI's native ops).
// Min and Max of integers, and every op of float32/float64, stay MPI's native ops.
#pragma once

#include <mpi.h>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"

namespace tfring {

class MpiOwnOps {
 public:
  Status Create();  // commits the types and creates the ops; call once after MPI_Init
  void Free();
  // The datatype to pass MPI for `dtype` (tfring's own for 16-bit floats).
  MPI_Datatype type(DataType dtype) const;
  // tfring's own op for (dtype, op), or MPI_OP_NULL where MPI's native op is right.
  MPI_Op op(DataType dtype, ReduceOp op) const;

 private:
  MPI_Datatype float16_ = MPI_DATATYPE_NULL, bfloat16_ = MPI_DATATYPE_NULL;
  MPI_Op ops_[kNumDataTypes][6] = {};  // [DataType value][ReduceOp value]; 0: none
  bool created_ = false;
};

}  // namespace tfring
