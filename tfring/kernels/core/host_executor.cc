#include "tfring/kernels/core/host_executor.h"

#include <cctype>
#include <cstring>
#include <numeric>

#include "tfring/kernels/common/elementwise.h"
#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/core/tensor_key.h"

namespace tfring {
namespace {

// memcpy with a null pointer is undefined even for zero bytes, and empty tensors may have
// null buffers.
void CopyBytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

// The error of an op whose output could not be allocated on this rank (its peers' succeed).
Status WithoutOutput(const Entry& e, const Status& why) {
  return Status(why.code(), "allocating the output of '" + KeyString(e.request.key) +
                                "' failed on this rank (the other ranks' completed): " +
                                why.message());
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

void HostExecutor::Postprocess(DataType dtype, double postscale, const Response& r,
                               const void* from, void* to, int64_t count) {
  const bool average = r.reduce_op == ReduceOp::kAverage;
  const int divisor = Contributors(r, size_);  // the ranks that had data
  double factor = postscale;
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
  const ReduceOp wire_op = WireOp(r.reduce_op);
  const size_t esize = DataTypeSize(dtype);
  if (group.size() == 1 && MixedParts(group[0]->request)) return AllreduceMixedUnit(*group[0], r);
  if (group.size() == 1) {
    // A lone tensor (a grouped op's unit too) goes straight from its input to its output:
    // no fusion-buffer copy.
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
    Postprocess(dtype, e.request.postscale_factor, r, e.output, e.output, count);
    return Status::OK();
  }
  const Packed packed = PlanPacked(group, kHostAllreduceAlignment);
  char* buffer = FusionBuffer(0, packed.total_bytes);
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
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t i = 0; i < group.size(); ++i) {
    Postprocess(dtype, group[i]->request.postscale_factor, r, buffer + packed.offsets[i],
                group[i]->output, packed.bytes[i] / esize);
  }
  return Status::OK();
}

Status HostExecutor::AllreduceMixedUnit(Entry& e, const Response& r) {
  const std::vector<TensorPart>& parts = e.request.parts;
  const Packed packed = PlanParts(parts);
  char* buffer = static_cast<char*>(e.output);
  if (e.output != e.input) CopyBytes(e.output, e.input, packed.total_bytes);
  const ReduceOp wire_op = WireOp(r.reduce_op);
  if (recording()) {
    Phase({&e}, PhaseName(backend_->allreduce_phase()),
          Timeline::GroupArgs({&e}, packed.total_bytes));
  }
  // One call per run of tensors of one dtype, over the run's span of the buffer (its gaps
  // are zeros on every rank, and no output sees them).
  for (size_t first = 0; first < parts.size();) {
    const DataType dtype = parts[first].dtype;
    const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
    size_t end = first + 1;
    while (end < parts.size() && parts[end].dtype == dtype) ++end;
    for (size_t i = first; i < end; ++i) {
      if (e.request.prescale_factor != 1.0) {
        ScaleInPlace(dtype, e.request.prescale_factor, buffer + packed.offsets[i],
                     packed.bytes[i] / esize);
      }
    }
    char* span = buffer + packed.offsets[first];
    const int64_t span_bytes =
        packed.offsets[end - 1] + packed.bytes[end - 1] - packed.offsets[first];
    TFRING_RETURN_IF_ERROR(backend_->Allreduce(span, span, span_bytes / esize, dtype, wire_op));
    for (size_t i = first; i < end; ++i) {
      char* part = buffer + packed.offsets[i];
      Postprocess(dtype, e.request.postscale_factor, r, part, part, packed.bytes[i] / esize);
    }
    first = end;
  }
  return Status::OK();
}

Status HostExecutor::Allgather(const std::vector<Entry*>& group,
                               const std::vector<const Response*>& rs) {
  // Allocate every output first: its first dimension is the sum over ranks. An output that
  // cannot be allocated (the framework is out of memory) must not keep this rank out of the
  // collective its peers are already in, which would hang them: it still sends its input and
  // receives into the fusion buffer, and only this rank's op fails, with the reason.
  Status allocated;
  std::vector<bool> has_output(group.size(), true);
  for (size_t i = 0; i < group.size(); ++i) {
    Entry& e = *group[i];
    const Status s = e.allocate_output(GatheredShape(e, *rs[i]), &e.output);
    if (!s.ok()) {
      has_output[i] = false;
      if (allocated.ok()) allocated = WithoutOutput(e, s);
    }
  }
  const GatherLayout layout = PlanGather(group, rs, rank_, size_);
  const std::string args = recording() ? Timeline::GroupArgs(group, layout.total_bytes) : "";
  if (group.size() == 1) {
    if (recording()) Phase(group, PhaseName("ALLGATHER"), args);
    void* out = has_output[0] ? group[0]->output : FusionBuffer(1, layout.total_bytes);
    TFRING_RETURN_IF_ERROR(backend_->Allgather(group[0]->input, out, layout.bytes_per_rank));
    return allocated;
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
    if (!has_output[p.tensor]) continue;
    CopyBytes(static_cast<char*>(group[p.tensor]->output) + p.to_offset, recv + p.from_offset,
              p.bytes);
  }
  return allocated;
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
  const ReduceOp wire_op = WireOp(r.reduce_op);
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
    Postprocess(r.dtype, e->request.postscale_factor, r, e->output, e->output, counts[rank_]);
  }
  return Status::OK();
}

Status HostExecutor::Alltoall(const std::vector<Entry*>& group, const Response& r) {
  // As Allgather: an output this rank cannot allocate is received into the fusion buffer, so
  // that the peers' exchange completes; this rank's op fails alone.
  Status allocated;
  for (Entry* e : group) {
    const AlltoallLayout l = PlanAlltoall(*e, r, rank_, size_);
    Status s = e->set_received_splits(l.received_rows);
    if (s.ok()) s = e->allocate_output(l.output_shape, &e->output);
    if (!s.ok() && allocated.ok()) allocated = WithoutOutput(*e, s);
    void* out = s.ok() ? e->output : FusionBuffer(1, std::accumulate(l.recv_bytes.begin(),
                                                                  l.recv_bytes.end(), int64_t{0}));
    if (recording()) {
      Phase({e}, PhaseName("ALLTOALL"),
            Timeline::GroupArgs({e}, TensorBytes(e->request)));
    }
    TFRING_RETURN_IF_ERROR(backend_->Alltoall(e->input, l.send_bytes, out, l.recv_bytes));
  }
  return allocated;
}

}  // namespace tfring
