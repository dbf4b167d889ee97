#include "tfring/kernels/core/buffer_layout.h"

#include <cstring>

namespace tfring {

Packed PlanPacked(const std::vector<Entry*>& group, int64_t alignment) {
  std::vector<int64_t> bytes;
  bytes.reserve(group.size());
  for (const Entry* e : group) bytes.push_back(TensorBytes(e->request));
  return PlanPackedBytes(std::move(bytes), alignment);
}

Packed PlanPackedBytes(std::vector<int64_t> bytes, int64_t alignment) {
  Packed p;
  p.offsets.reserve(bytes.size());
  int64_t end = 0;
  for (int64_t b : bytes) {
    const int64_t offset = (end + alignment - 1) / alignment * alignment;
    p.offsets.push_back(offset);
    end = offset + b;
  }
  p.bytes = std::move(bytes);
  p.total_bytes = end;
  return p;
}

Packed PlanParts(const std::vector<TensorPart>& parts) {
  std::vector<int64_t> bytes;
  bytes.reserve(parts.size());
  for (const TensorPart& part : parts) {
    bytes.push_back(NumElements(part.shape) * static_cast<int64_t>(DataTypeSize(part.dtype)));
  }
  Packed p = PlanPackedBytes(std::move(bytes), kHostAllreduceAlignment);
  p.total_bytes = (p.total_bytes + kHostAllreduceAlignment - 1) / kHostAllreduceAlignment *
                  kHostAllreduceAlignment;
  return p;
}

Packed DescribeUnit(Signature* s) {
  Packed plan = PlanParts(s->parts);
  s->dtype = MixedParts(*s) ? DataType::kUInt8 : s->parts[0].dtype;
  s->shape = {plan.total_bytes / static_cast<int64_t>(DataTypeSize(s->dtype))};
  return plan;
}

void PackInto(const Packed& packed, const std::vector<const void*>& inputs, char* buffer) {
  int64_t end = 0;  // of the last tensor placed
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t at = packed.offsets[i];
    if (at > end) std::memset(buffer + end, 0, at - end);
    // memcpy from a null pointer is undefined even for no bytes; empty tensors may have one.
    if (packed.bytes[i] > 0) std::memcpy(buffer + at, inputs[i], packed.bytes[i]);
    end = at + packed.bytes[i];
  }
  if (packed.total_bytes > end) std::memset(buffer + end, 0, packed.total_bytes - end);
}

GatherLayout PlanGather(const std::vector<Entry*>& group, const std::vector<const Response*>& rs,
                        int rank, int size) {
  GatherLayout layout;
  layout.bytes_per_rank.assign(size, 0);
  std::vector<int64_t> to_offset(group.size(), 0);
  int64_t from = 0;
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < group.size(); ++i) {
      const int64_t n = rs[i]->first_dims[r] * RowBytes(group[i]->request);
      if (group.size() > 1) layout.pieces.push_back({i, from, to_offset[i], n});
      layout.bytes_per_rank[r] += n;
      to_offset[i] += n;
      from += n;
    }
  }
  layout.total_bytes = from;
  for (size_t i = 0; i < group.size(); ++i) {
    layout.send.offsets.push_back(layout.send.total_bytes);
    layout.send.bytes.push_back(rs[i]->first_dims[rank] * RowBytes(group[i]->request));
    layout.send.total_bytes += layout.send.bytes.back();
  }
  return layout;
}

Shape GatheredShape(const Entry& e, const Response& r) {
  Shape shape = e.request.shape;
  shape[0] = 0;
  for (int64_t d : r.first_dims) shape[0] += d;
  return shape;
}

AlltoallLayout PlanAlltoall(const Entry& e, const Response& r, int rank, int size) {
  AlltoallLayout l;
  const int64_t row = RowBytes(e.request);
  l.output_shape = e.request.shape;
  l.output_shape[0] = 0;
  for (int q = 0; q < size; ++q) {
    l.send_bytes.push_back(r.all_splits[rank * size + q] * row);
    const int64_t rows = r.all_splits[q * size + rank];
    l.received_rows.push_back(rows);
    l.recv_bytes.push_back(rows * row);
    l.output_shape[0] += rows;
  }
  return l;
}

}  // namespace tfring
