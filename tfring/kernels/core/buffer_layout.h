// Where the tensors of a fused group sit in the fusion buffers: one plan shared by the
// host and device executors, so that they pack and unpack alike and differ only in how
// they copy bytes (memcpy, or a copy on the GPU stream).
//
// Allreduce and broadcast: whole tensors, one after another, in group order. The host
// executor's allreduce starts each tensor at a multiple of kHostAllreduceAlignment (the
// gaps are zeroed). A grouped allreduce's kernel packs its tensors alike into one buffer,
// its unit (Signature::parts), each output a slice of it aligned as TensorFlow requires.
// Allgather: rank r's block of the gathered buffer holds rank r's rows of every tensor of the group,
// tensor after tensor; output i needs its rows from every block, in rank order. A lone
// tensor's block is its output's slice, so it needs no unpacking.
#pragma once

#include <cstdint>
#include <vector>

#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/message.h"

namespace tfring {

// TensorFlow's tensors must start at a multiple of 64 bytes (Eigen's widest alignment).
constexpr int64_t kHostAllreduceAlignment = 64;

struct Packed {
  std::vector<int64_t> offsets;  // bytes: where group[i] starts in the buffer
  std::vector<int64_t> bytes;    // group[i]'s bytes
  int64_t total_bytes = 0;       // up to the end of the last tensor
};
// Each tensor starts at the next multiple of `alignment` bytes (1: packed tight).
Packed PlanPacked(const std::vector<Entry*>& group, int64_t alignment = 1);
// The same plan from the tensors' sizes in bytes.
Packed PlanPackedBytes(std::vector<int64_t> bytes, int64_t alignment);
// A unit's buffer: its tensors at multiples of kHostAllreduceAlignment, and total_bytes
// rounded up to one too, so that the buffer is a whole number of elements of any dtype.
Packed PlanParts(const std::vector<TensorPart>& parts);
// Makes `s` the unit of its `parts` (at least one): `dtype` their common one, or kUInt8
// when they differ, and `shape` the buffer's elements of it. Returns the buffer's plan.
Packed DescribeUnit(Signature* s);
// Copies tensor i's packed.bytes[i] bytes from inputs[i] to buffer + packed.offsets[i], and
// zeroes the rest of the buffer's packed.total_bytes (the gaps are zeros on every rank).
void PackInto(const Packed& packed, const std::vector<const void*>& inputs, char* buffer);

struct GatherPiece {
  size_t tensor;         // index in the group
  int64_t from_offset;   // in the gathered buffer
  int64_t to_offset;     // in the tensor's output
  int64_t bytes;
};

struct GatherLayout {
  std::vector<int64_t> bytes_per_rank;  // each rank's block
  int64_t total_bytes = 0;
  Packed send;                          // this rank's block: its rows of each tensor
  std::vector<GatherPiece> pieces;      // gathered buffer -> outputs, for a fused group
};

// rs[i] is group[i]'s response; `rank` is this rank's position in the set.
GatherLayout PlanGather(const std::vector<Entry*>& group, const std::vector<const Response*>& rs,
                        int rank, int size);

// Alltoall of `e` (its response `r`): bytes this rank sends to and receives from each rank,
// rows received from each, and the output's shape.
struct AlltoallLayout {
  std::vector<int64_t> send_bytes, recv_bytes, received_rows;
  Shape output_shape;
};
AlltoallLayout PlanAlltoall(const Entry& e, const Response& r, int rank, int size);

// The shape of group member `e`'s gathered output.
Shape GatheredShape(const Entry& e, const Response& r);

}  // namespace tfring
