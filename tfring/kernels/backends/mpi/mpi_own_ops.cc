#include "tfring/kernels/backends/mpi/mpi_own_ops.h"

#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/common/elementwise.h"

namespace tfring {
namespace {

using UserFn = void (*)(void*, void*, int*, MPI_Datatype*);

template <DataType D, ReduceOp O>
void Combine(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(D, O, in, inout, *len);
}

struct OwnOp {
  DataType dtype;
  ReduceOp op;
  UserFn fn;
};

template <DataType D, ReduceOp O>
constexpr OwnOp Own() {
  return {D, O, Combine<D, O>};
}

// Every op for 16-bit floats; Sum and Product for integers (the header says why).
constexpr OwnOp kOwnOps[] = {
    Own<DataType::kFloat16, ReduceOp::kSum>(),    Own<DataType::kFloat16, ReduceOp::kProduct>(),
    Own<DataType::kFloat16, ReduceOp::kMin>(),    Own<DataType::kFloat16, ReduceOp::kMax>(),
    Own<DataType::kBFloat16, ReduceOp::kSum>(),   Own<DataType::kBFloat16, ReduceOp::kProduct>(),
    Own<DataType::kBFloat16, ReduceOp::kMin>(),   Own<DataType::kBFloat16, ReduceOp::kMax>(),
    Own<DataType::kUInt8, ReduceOp::kSum>(),      Own<DataType::kUInt8, ReduceOp::kProduct>(),
    Own<DataType::kInt8, ReduceOp::kSum>(),       Own<DataType::kInt8, ReduceOp::kProduct>(),
    Own<DataType::kUInt16, ReduceOp::kSum>(),     Own<DataType::kUInt16, ReduceOp::kProduct>(),
    Own<DataType::kInt16, ReduceOp::kSum>(),      Own<DataType::kInt16, ReduceOp::kProduct>(),
    Own<DataType::kInt32, ReduceOp::kSum>(),      Own<DataType::kInt32, ReduceOp::kProduct>(),
    Own<DataType::kInt64, ReduceOp::kSum>(),      Own<DataType::kInt64, ReduceOp::kProduct>(),
};

}  // namespace

Status MpiOwnOps::Create() {
  if (created_) return Status::OK();
  TFRING_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &float16_));
  TFRING_MPI_CHECK(MPI_Type_commit(&float16_));
  TFRING_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bfloat16_));
  TFRING_MPI_CHECK(MPI_Type_commit(&bfloat16_));
  for (const OwnOp& own : kOwnOps) {
    // Commutative (1): MPI may combine in any order, as it does with its own ops.
    TFRING_MPI_CHECK(
        MPI_Op_create(reinterpret_cast<MPI_User_function*>(own.fn), 1,
                      &ops_[static_cast<int>(own.dtype)][static_cast<int>(own.op)]));
  }
  created_ = true;
  return Status::OK();
}

void MpiOwnOps::Free() {
  if (!created_) return;
  for (auto& row : ops_)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL && op != 0) MPI_Op_free(&op);
  MPI_Type_free(&float16_);
  MPI_Type_free(&bfloat16_);
  created_ = false;
}

MPI_Datatype MpiOwnOps::type(DataType dtype) const {
  switch (dtype) {
    case DataType::kFloat16: return float16_;
    case DataType::kBFloat16: return bfloat16_;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt16: return MPI_UINT16_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op MpiOwnOps::op(DataType dtype, ReduceOp op) const {
  const MPI_Op own = ops_[static_cast<int>(dtype)][static_cast<int>(op)];
  return own == 0 ? MPI_OP_NULL : own;
}

}  // namespace tfring
