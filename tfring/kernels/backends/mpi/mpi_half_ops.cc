#include "tfring/kernels/backends/mpi/mpi_half_ops.h"

#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/common/elementwise.h"

namespace tfring {
namespace {

template <DataType D, ReduceOp O>
void Combine(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(D, O, in, inout, *len);
}

using UserFn = void (*)(void*, void*, int*, MPI_Datatype*);

template <DataType D>
UserFn FnFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return Combine<D, ReduceOp::kMin>;
    case ReduceOp::kMax: return Combine<D, ReduceOp::kMax>;
    case ReduceOp::kProduct: return Combine<D, ReduceOp::kProduct>;
    default: return Combine<D, ReduceOp::kSum>;
  }
}

}  // namespace

Status MpiHalfOps::Create() {
  if (created_) return Status::OK();
  TFRING_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &float16_));
  TFRING_MPI_CHECK(MPI_Type_commit(&float16_));
  TFRING_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bfloat16_));
  TFRING_MPI_CHECK(MPI_Type_commit(&bfloat16_));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    const int i = static_cast<int>(op);
    TFRING_MPI_CHECK(MPI_Op_create(
        reinterpret_cast<MPI_User_function*>(FnFor<DataType::kFloat16>(op)), 1, &ops_[0][i]));
    TFRING_MPI_CHECK(MPI_Op_create(
        reinterpret_cast<MPI_User_function*>(FnFor<DataType::kBFloat16>(op)), 1, &ops_[1][i]));
  }
  created_ = true;
  return Status::OK();
}

void MpiHalfOps::Free() {
  if (!created_) return;
  for (auto& row : ops_)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL && op != 0) MPI_Op_free(&op);
  MPI_Type_free(&float16_);
  MPI_Type_free(&bfloat16_);
  created_ = false;
}

MPI_Op MpiHalfOps::op(DataType dtype, ReduceOp op) const {
  return ops_[dtype == DataType::kBFloat16 ? 1 : 0][static_cast<int>(op)];
}

}  // namespace tfring
