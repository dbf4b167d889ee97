#include "tfring/kernels/core/host_executor.h"

#include <cctype>
#include <cstring>

#include "tfring/kernels/common/elementwise.h"
#include "tfring/kernels/core/buffer_layout.h"

namespace tfring {
namespace {

// memcpy with a null pointer is undefined even for zero bytes, and empty tensors may have
// null buffers.
void CopyBytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

// True when the group's outputs lie in one region exactly as `packed` places them, so that
// the region can serve as the fusion buffer. The region must hold the whole span, gaps
// included: they are written too, and memory between separately allocated outputs may
// belong to someone else.
bool OutputsLaidOutAs(const std::vector<Entry*>& group, const Packed& packed) {
  const Entry& first = *group[0];
  if (first.output_region == nullptr) return false;
  const char* base = static_cast<const char*>(first.output);
  const char* region = static_cast<const char*>(first.output_region);
  if (base < region || base + packed.total_bytes > region + first.output_region_bytes) {
    return false;
  }
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i]->output_region != first.output_region ||
        static_cast<const char*>(group[i]->output) != base + packed.offsets[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

HostExecutor::HostExecutor(std::unique_ptr<Backend> backend, int rank, int size)
    : backend_(std::move(backend)), rank_(rank), size_(size) {}

std::string HostExecutor::PhaseName(const char* collective) const {
  std::string name = backend_->name();  // "MPI", "inproc"
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name + "_" + collective;
}

char* HostExecutor::FusionBuffer(size_t which, size_t bytes) {
  std::vector<char>& b = fusion_buffers_[which];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

void HostExecutor::Postprocess(const Entry& e, const Response& r, const void* from, void* to,
                               int64_t count) {
  const DataType dtype = e.request.dtype;
  const bool average = r.reduce_op == ReduceOp::kAverage;
  const int divisor = Contributors(r, size_);  // the ranks that had data
  double factor = e.request.postscale_factor;
  if (average && factor == 1.0 && !IsFloatingPoint(dtype)) {
    if (to != from) CopyBytes(to, from, count * DataTypeSize(dtype));
    DivideTowardZeroInPlace(dtype, divisor, to, count);  // exact
    return;
  }
  if (average) factor /= divisor;
  if (factor != 1.0) {
    ScaleInto(dtype, factor, from, to, count);  // the copy and the scale in one pass
  } else if (to != from) {
    CopyBytes(to, from, count * DataTypeSize(dtype));
  }
}

Status HostExecutor::Allreduce(const std::vector<Entry*>& group, const Response& r) {
  const DataType dtype = r.dtype;
  const ReduceOp wire_op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  const size_t esize = DataTypeSize(dtype);
  if (group.size() == 1) {
    // A lone tensor goes straight from its input to its output: no fusion-buffer copy.
    Entry& e = *group[0];
    const int64_t count = NumElements(e.request.shape);
    const void* in = e.input;
    if (e.request.prescale_factor != 1.0) {
      if (e.output != e.input) CopyBytes(e.output, e.input, count * esize);
      ScaleInPlace(dtype, e.request.prescale_factor, e.output, count);
      in = e.output;
    }
    if (recording()) {
      Phase(group, PhaseName(backend_->allreduce_phase()),
            Timeline::GroupArgs(group, count * esize));
    }
    TFRING_RETURN_IF_ERROR(backend_->Allreduce(in, e.output, count, dtype, wire_op));
    Postprocess(e, r, e.output, e.output, count);
    return Status::OK();
  }
  const Packed packed = PlanPacked(group, kHostAllreduceAlignment);
  const bool in_outputs = OutputsLaidOutAs(group, packed);
  char* buffer = in_outputs ? static_cast<char*>(group[0]->output)
                            : FusionBuffer(0, packed.total_bytes);
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  for (size_t i = 0; i < group.size(); ++i) {
    CopyBytes(buffer + packed.offsets[i], group[i]->input, packed.bytes[i]);
    if (i + 1 < group.size()) {  // the gap before the next tensor: zeros, on every rank
      const int64_t end = packed.offsets[i] + packed.bytes[i];
      std::memset(buffer + end, 0, packed.offsets[i + 1] - end);
    }
    if (group[i]->request.prescale_factor != 1.0) {
      ScaleInPlace(dtype, group[i]->request.prescale_factor, buffer + packed.offsets[i],
                   packed.bytes[i] / esize);
    }
  }
  if (recording()) {
    Phase(group, PhaseName(backend_->allreduce_phase()),
          Timeline::GroupArgs(group, packed.total_bytes));
  }
  TFRING_RETURN_IF_ERROR(
      backend_->Allreduce(buffer, buffer, packed.total_bytes / esize, dtype, wire_op));
  if (!in_outputs && recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t i = 0; i < group.size(); ++i) {
    char* out = in_outputs ? buffer + packed.offsets[i] : static_cast<char*>(group[i]->output);
    Postprocess(*group[i], r, buffer + packed.offsets[i], out, packed.bytes[i] / esize);
  }
  return Status::OK();
}

Status HostExecutor::Allgather(const std::vector<Entry*>& group,
                               const std::vector<const Response*>& rs) {
  // Allocate every output first: its first dimension is the sum over ranks.
  for (size_t i = 0; i < group.size(); ++i) {
    Entry& e = *group[i];
    TFRING_RETURN_IF_ERROR(e.allocate_output(GatheredShape(e, *rs[i]), &e.output));
  }
  const GatherLayout layout = PlanGather(group, rs, rank_, size_);
  const std::string args = recording() ? Timeline::GroupArgs(group, layout.total_bytes) : "";
  if (group.size() == 1) {
    if (recording()) Phase(group, PhaseName("ALLGATHER"), args);
    return backend_->Allgather(group[0]->input, group[0]->output, layout.bytes_per_rank);
  }
  char* send = FusionBuffer(0, layout.send.total_bytes);
  char* recv = FusionBuffer(1, layout.total_bytes);
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  for (size_t i = 0; i < group.size(); ++i) {
    CopyBytes(send + layout.send.offsets[i], group[i]->input, layout.send.bytes[i]);
  }
  if (recording()) Phase(group, PhaseName("ALLGATHER"), args);
  TFRING_RETURN_IF_ERROR(backend_->Allgather(send, recv, layout.bytes_per_rank));
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  for (const GatherPiece& p : layout.pieces) {
    CopyBytes(static_cast<char*>(group[p.tensor]->output) + p.to_offset, recv + p.from_offset,
              p.bytes);
  }
  return Status::OK();
}

Status HostExecutor::Broadcast(const std::vector<Entry*>& group, const Response& r) {
  const bool is_root = rank_ == r.root_rank;
  if (group.size() == 1) {
    Entry& e = *group[0];
    const int64_t bytes = TensorBytes(e.request);
    if (is_root && e.output != e.input) CopyBytes(e.output, e.input, bytes);
    if (recording()) Phase(group, PhaseName("BROADCAST"), Timeline::GroupArgs(group, bytes));
    return backend_->Broadcast(e.output, bytes, r.root_rank);
  }
  const Packed packed = PlanPacked(group);
  char* buffer = FusionBuffer(0, packed.total_bytes);
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  for (size_t i = 0; i < group.size() && is_root; ++i) {
    CopyBytes(buffer + packed.offsets[i], group[i]->input, packed.bytes[i]);
  }
  if (recording()) {
    Phase(group, PhaseName("BROADCAST"),
          Timeline::GroupArgs(group, packed.total_bytes));
  }
  TFRING_RETURN_IF_ERROR(backend_->Broadcast(buffer, packed.total_bytes, r.root_rank));
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t i = 0; i < group.size(); ++i) {
    CopyBytes(group[i]->output, buffer + packed.offsets[i], packed.bytes[i]);
  }
  return Status::OK();
}

Status HostExecutor::Reducescatter(const std::vector<Entry*>& group, const Response& r) {
  const ReduceOp wire_op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  const size_t esize = DataTypeSize(r.dtype);
  for (Entry* e : group) {
    const int64_t row = RowBytes(e->request) / static_cast<int64_t>(esize);
    std::vector<int64_t> counts = ReducescatterRows(e->request.shape[0], size_);
    for (int64_t& c : counts) c *= row;
    const int64_t total = NumElements(e->request.shape);
    const void* in = e->input;
    if (e->request.prescale_factor != 1.0) {
      char* scaled = FusionBuffer(0, total * esize);
      CopyBytes(scaled, e->input, total * esize);
      ScaleInPlace(r.dtype, e->request.prescale_factor, scaled, total);
      in = scaled;
    }
    if (recording()) {
      Phase({e}, PhaseName("REDUCESCATTER"),
            Timeline::GroupArgs({e}, total * esize));
    }
    TFRING_RETURN_IF_ERROR(backend_->Reducescatter(in, e->output, counts, r.dtype, wire_op));
    Postprocess(*e, r, e->output, e->output, counts[rank_]);
  }
  return Status::OK();
}

Status HostExecutor::Alltoall(const std::vector<Entry*>& group, const Response& r) {
  for (Entry* e : group) {
    const AlltoallLayout l = PlanAlltoall(*e, r, rank_, size_);
    TFRING_RETURN_IF_ERROR(e->set_received_splits(l.received_rows));
    TFRING_RETURN_IF_ERROR(e->allocate_output(l.output_shape, &e->output));
    if (recording()) {
      Phase({e}, PhaseName("ALLTOALL"),
            Timeline::GroupArgs({e}, TensorBytes(e->request)));
    }
    TFRING_RETURN_IF_ERROR(backend_->Alltoall(e->input, l.send_bytes, e->output, l.recv_bytes));
  }
  return Status::OK();
}

}  // namespace tfring
