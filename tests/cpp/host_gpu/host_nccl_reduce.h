// The host GPU's reductions (host_gpu.h): elementwise, one rank's part at a time, so that
// every rank combines the parts in rank order and gets the same bits. Integers wrap, as on
// a GPU; float16 and bfloat16 are combined in float and rounded after each part, as a ring
// rounds after each step.
#pragma once

#include <nccl.h>

#include <cstddef>

namespace host_gpu {

// The reduction of a PreMulSum op (ncclRedOpCreatePreMulSum): each part times its scalar,
// summed.
constexpr int kPreMulSum = -1;

// Bytes per element; 0 for the types not emulated (the 8-bit floats).
size_t TypeSize(ncclDataType_t t);

// acc (op)= in, elementwise, over n elements; `first`: acc = in (scaled, for PreMulSum).
void Accumulate(void* acc, const void* in, size_t n, ncclDataType_t t, int op, double scale,
                bool first);

// ncclAvg's last step: the sum divided by the number of ranks (integers toward zero).
void DivideBy(void* acc, size_t n, ncclDataType_t t, int size);

}  // namespace host_gpu
