// MPI datatypes and reduction ops for float16 and bfloat16, which MPI does not have.
// Each element is widened to float, combined, and rounded back (round to nearest even).
#pragma once

#include <mpi.h>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"

namespace tfring {

class MpiHalfOps {
 public:
  Status Create();  // commits the types and creates the ops; call once after MPI_Init
  void Free();
  MPI_Datatype type(DataType dtype) const {
    return dtype == DataType::kFloat16 ? float16_ : bfloat16_;
  }
  MPI_Op op(DataType dtype, ReduceOp op) const;

 private:
  MPI_Datatype float16_ = MPI_DATATYPE_NULL, bfloat16_ = MPI_DATATYPE_NULL;
  MPI_Op ops_[2][6] = {};  // [is_bfloat16][ReduceOp value]
  bool created_ = false;
};

}  // namespace tfring
