// Value types shared by every layer: element types, reduction ops, collective kinds.
// The numeric values of ReduceOp are part of the Python API (tfring/collectives.py mirrors
// them, and a unit test checks the two agree through the C API); keep them stable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tfring {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kUInt16 = 9,
  kInt16 = 10,
};
constexpr int kNumDataTypes = 11;

// Same values as Horovod's (Average=0, Sum=1, Adasum=2, Min=3, Max=4, Product=5).
enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};

// The op the data is reduced with: an Average travels as a Sum and is divided afterwards
// (by the ranks that had data, which only the executor knows), so no backend ever sees it.
constexpr ReduceOp WireOp(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}

enum class CollectiveKind : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  // No data: completes once every rank has submitted it (negotiation is the barrier).
  kBarrier = 3,
  // Reduce, then rank r keeps its block of rows (ReducescatterRows, message.h).
  kReducescatter = 4,
  // Rank q sends rows splits[r] of its tensor to rank r (Request::splits).
  kAlltoall = 5,
  // Local only, never negotiated: this rank has run out of data (tfring.join). Until every
  // rank has joined, it takes part in the others' collectives with the identity of their
  // reduction; then every rank's join completes with the last rank to join.
  kJoin = 6,
};

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
bool IsFloatingPoint(DataType dtype);
bool IsValidReduceOp(int value);
const char* ReduceOpName(ReduceOp op);
const char* CollectiveKindName(CollectiveKind kind);

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

}  // namespace tfring
