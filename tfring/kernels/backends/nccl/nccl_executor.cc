// NcclExecutor's collectives: allreduce (PreMulSum for the scale factors), allgather,
// broadcast, reducescatter and alltoall on device buffers. Communicators, streams, buffers
// and error handling are in nccl_executor_lifecycle.cc.
#include "tfring/kernels/backends/nccl/nccl_executor.h"

#include <cstring>

#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "tfring/kernels/backends/nccl/nccl_check.h"
#include "tfring/kernels/common/elementwise.h"
#include "tfring/kernels/common/half.h"
#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/buffer_layout.h"

#define TFRING_NCCL_LAUNCH(call, ...) \
  TFRING_RETURN_IF_ERROR(Launched((call), #call, {__VA_ARGS__}))

namespace tfring {
namespace {

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBool: return ncclUint8;
    case DataType::kUInt16:
    case DataType::kInt16: break;  // NCCL has no 16-bit integers: the kernels refuse them
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (WireOp(op)) {
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
    default: return ncclSum;
  }
}

// PreMulSum's scalar, in the reduction's own type.
union Scalar {
  float f32;
  double f64;
  uint16_t bits16;
};

Scalar ScalarOf(DataType dtype, double factor) {
  Scalar s;
  std::memset(&s, 0, sizeof(s));
  switch (dtype) {
    case DataType::kFloat16: s.bits16 = FloatToHalf(static_cast<float>(factor)); break;
    case DataType::kBFloat16: s.bits16 = FloatToBFloat16(static_cast<float>(factor)); break;
    case DataType::kFloat64: s.f64 = factor; break;
    default: s.f32 = static_cast<float>(factor); break;
  }
  return s;
}

}  // namespace
Status NcclExecutor::PlanReduction(const Response& r, const Comm& comm, Reduction* plan) {
  plan->op = NcclOp(r.reduce_op);
  plan->host_op = WireOp(r.reduce_op);
  const bool additive = r.reduce_op == ReduceOp::kSum || r.reduce_op == ReduceOp::kAverage;
  if (!IsFloatingPoint(r.dtype)) {
    // Integers are scaled on the host, as the host path does: an Average alone is an exact
    // division toward zero; scale factors are applied in double and truncated.
    const bool average = r.reduce_op == ReduceOp::kAverage;
    plan->prescale_on_host = r.prescale_factor;
    plan->divide_on_host = average && r.postscale_factor == 1.0;
    if (!plan->divide_on_host) {
      plan->postscale_on_host = r.postscale_factor / (average ? layout_.size : 1);
    }
    return Status::OK();
  }
  if (!additive) {
    plan->prescale_on_host = r.prescale_factor;
    plan->postscale_on_host = r.postscale_factor;
    return Status::OK();
  }
  double factor = r.prescale_factor * r.postscale_factor;
  if (r.reduce_op == ReduceOp::kAverage) factor /= layout_.size;
  if (factor == 1.0) return Status::OK();
  Scalar scalar = ScalarOf(r.dtype, factor);
  TFRING_NCCL_LAUNCH(ncclRedOpCreatePreMulSum(&plan->op, &scalar, NcclType(r.dtype),
                                              ncclScalarHostImmediate, comm.comm),
                     &comm);
  plan->premulsum = true;
  return Status::OK();
}

Status NcclExecutor::ReduceBuffer(const void* in, void* out, int64_t count, DataType dtype,
                                  const Response& r) {
  const ncclDataType_t type = NcclType(dtype);
  const bool hierarchical = options_.hierarchical_allreduce;
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  const Comm& comm = hierarchical ? local_ : world_;
  Reduction plan;
  TFRING_RETURN_IF_ERROR(PlanReduction(r, comm, &plan));
  if (plan.prescale_on_host != 1.0) {
    TFRING_RETURN_IF_ERROR(CopyAsync(out, in, bytes));
    TFRING_RETURN_IF_ERROR(ThroughHost(out, bytes, "prescale it", [&](char* host) {
      ScaleInPlace(dtype, plan.prescale_on_host, host, count);
      return Status::OK();
    }));
    in = out;
  }
  Status s;
  if (!hierarchical) {
    s = Launched(ncclAllReduce(in, out, count, type, plan.op, world_.comm, stream_),
                 "ncclAllReduce", {&world_});
  } else {
    // Reduce onto the host's first rank over NCCL, across hosts over MPI among the hosts'
    // first ranks (the scale factor is applied once, in the first step), then broadcast
    // inside each host over NCCL.
    s = Launched(ncclReduce(in, out, count, type, plan.op, 0, local_.comm, stream_), "ncclReduce",
                 {&local_});
    if (layout_.local_rank == 0 && layout_.cross_size > 1) {
      s = AcrossHosts(out, bytes, count, dtype, plan.host_op, s);
    }
    if (s.ok()) {
      s = Launched(ncclBroadcast(out, out, bytes, ncclUint8, 0, local_.comm, stream_),
                   "ncclBroadcast", {&local_});
    }
  }
  // An operator may be destroyed as soon as the call that uses it has returned (not after
  // a failure: the communicator was aborted and freed, and the operator with it).
  if (plan.premulsum && broken_.ok()) ncclRedOpDestroy(plan.op, comm.comm);
  TFRING_RETURN_IF_ERROR(s);
  if (plan.divide_on_host || plan.postscale_on_host != 1.0) {
    TFRING_RETURN_IF_ERROR(ThroughHost(out, bytes, "average or postscale it", [&](char* host) {
      if (plan.divide_on_host) DivideTowardZeroInPlace(dtype, layout_.size, host, count);
      if (plan.postscale_on_host != 1.0) ScaleInPlace(dtype, plan.postscale_on_host, host, count);
      return Status::OK();
    }));
  }
  return Status::OK();
}

Status NcclExecutor::AcrossHosts(void* buffer, int64_t bytes, int64_t count, DataType dtype,
                                 ReduceOp op, Status local) {
  if (local.ok() && bytes > 0) {
    host_staging_.resize(bytes);
    // The reduce first, watched: the copy into pageable memory would wait for it unwatched
    // (ThroughHost says why).
    local = Complete("NCCL reduce inside this host");
    if (local.ok()) {
      const cudaError_t rc = cudaMemcpyAsync(host_staging_.data(), buffer, bytes,
                                             cudaMemcpyDeviceToHost, stream_);
      local = rc == cudaSuccess ? Complete("copying this host's reduce to the host")
                                : Fail(CudaStatus(rc, "cudaMemcpyAsync", __FILE__, __LINE__));
    }
  }
  int32_t failed_here = local.ok() ? 0 : 1, failed_anywhere = 0;
  const Status agreed = cross_host_->Allreduce(&failed_here, &failed_anywhere, 1,
                                               DataType::kInt32, ReduceOp::kMax);
  if (!local.ok()) return local;
  if (!agreed.ok()) return Fail(agreed);
  if (failed_anywhere) {
    return Fail(Status::Aborted("the NCCL reduce inside another host failed (its ranks say why)"));
  }
  if (bytes == 0) return Status::OK();
  const Status across = cross_host_->Allreduce(host_staging_.data(), host_staging_.data(), count,
                                               dtype, op);
  if (!across.ok()) return Fail(across);
  // host_staging_ must outlive the copy: every later use of it follows a Complete().
  TFRING_CUDA_CHECK(cudaMemcpyAsync(buffer, host_staging_.data(), bytes, cudaMemcpyHostToDevice,
                                    stream_));
  return Status::OK();
}

Status NcclExecutor::PackInputs(const std::vector<Entry*>& group, const Packed& packed,
                               char* buffer) {
  std::vector<DeviceCopy> copies;
  copies.reserve(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    copies.push_back({buffer + packed.offsets[i], group[i]->input, packed.bytes[i]});
  }
  return copier_.Copy(copies, stream_);
}

Status NcclExecutor::UnpackOutputs(const std::vector<Entry*>& group, const Packed& packed,
                                   const char* buffer) {
  std::vector<DeviceCopy> copies;
  copies.reserve(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    copies.push_back({group[i]->output, buffer + packed.offsets[i], packed.bytes[i]});
  }
  return copier_.Copy(copies, stream_);
}

Status NcclExecutor::RunAllreduce(const std::vector<Entry*>& group, const Response& r) {
  TFRING_RETURN_IF_ERROR(EnsureReady(group));
  TFRING_RETURN_IF_ERROR(WaitInputs(group));
  const size_t esize = DataTypeSize(r.dtype);
  if (group.size() == 1) {
    Entry& e = *group[0];
    const int64_t count = NumElements(e.request.shape);
    if (recording()) {
      Phase(group,
            options_.hierarchical_allreduce ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE",
            Timeline::GroupArgs(group, count * esize));
    }
    if (count > 0) TFRING_RETURN_IF_ERROR(ReduceBuffer(e.input, e.output, count, r.dtype, r));
    return Complete(std::string("NCCL allreduce of '") + e.request.name + "'");
  }
  const Packed packed = PlanPacked(group);
  const int64_t total = packed.total_bytes / static_cast<int64_t>(esize);
  char* buffer;
  TFRING_RETURN_IF_ERROR(DeviceBuffer(0, packed.total_bytes, &buffer));
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  TFRING_RETURN_IF_ERROR(PackInputs(group, packed, buffer));
  if (recording()) {
    Phase(group, options_.hierarchical_allreduce ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE",
          Timeline::GroupArgs(group, packed.total_bytes));
  }
  if (total > 0) TFRING_RETURN_IF_ERROR(ReduceBuffer(buffer, buffer, total, r.dtype, r));
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  TFRING_RETURN_IF_ERROR(UnpackOutputs(group, packed, buffer));
  return Complete("NCCL allreduce of " + std::to_string(group.size()) + " fused tensors, first '" +
                  r.name + "'");
}

Status NcclExecutor::GatherV(const void* in, void* out,
                             const std::vector<int64_t>& bytes_per_rank) {
  bool even = true;
  for (int64_t b : bytes_per_rank) even = even && b == bytes_per_rank[0];
  if (even) {
    if (bytes_per_rank[0] == 0) return Status::OK();
    return Launched(ncclAllGather(in, out, bytes_per_rank[0], ncclUint8, world_.comm, stream_),
                    "ncclAllGather", {&world_});
  }
  // Uneven: each rank broadcasts its block into its place, all in one NCCL group.
  const ncclResult_t start = ncclGroupStart();
  if (start != ncclSuccess) return Fail(NcclStatus(start, nullptr, "ncclGroupStart", __FILE__, __LINE__));
  int64_t offset = 0;
  ncclResult_t rc = ncclSuccess;
  for (int r = 0; r < layout_.size && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
    char* place = static_cast<char*>(out) + offset;
    rc = ncclBroadcast(r == layout_.rank ? in : place, place, bytes_per_rank[r], ncclUint8, r,
                       world_.comm, stream_);
    offset += bytes_per_rank[r];
  }
  const ncclResult_t end = ncclGroupEnd();
  TFRING_RETURN_IF_ERROR(Launched(rc, "ncclBroadcast", {&world_}));
  return Launched(end, "ncclGroupEnd", {&world_});
}

Status NcclExecutor::RunAllgather(const std::vector<Entry*>& group,
                                  const std::vector<const Response*>& rs) {
  TFRING_RETURN_IF_ERROR(EnsureReady(group));
  TFRING_RETURN_IF_ERROR(WaitInputs(group));
  for (size_t i = 0; i < group.size(); ++i) {
    Entry& e = *group[i];
    TFRING_RETURN_IF_ERROR(e.allocate_output(GatheredShape(e, *rs[i]), &e.output));
    // The framework may hand out memory that work still queued on its stream was using.
    TFRING_RETURN_IF_ERROR(WaitForProducerStream(e));
  }
  TFRING_RETURN_IF_ERROR(MarkInputsReady());
  const GatherLayout layout = PlanGather(group, rs, layout_.rank, layout_.size);
  const std::string what = "NCCL allgather of '" + rs[0]->name + "'" +
                           (group.size() > 1 ? " and " + std::to_string(group.size() - 1) +
                                                   " fused tensors"
                                             : "");
  const std::string args = recording() ? Timeline::GroupArgs(group, layout.total_bytes) : "";
  if (group.size() == 1) {
    if (recording()) Phase(group, "NCCL_ALLGATHER", args);
    TFRING_RETURN_IF_ERROR(GatherV(group[0]->input, group[0]->output, layout.bytes_per_rank));
    return Complete(what);
  }
  char *send, *recv;
  TFRING_RETURN_IF_ERROR(DeviceBuffer(0, layout.send.total_bytes, &send));
  TFRING_RETURN_IF_ERROR(DeviceBuffer(1, layout.total_bytes, &recv));
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  TFRING_RETURN_IF_ERROR(PackInputs(group, layout.send, send));
  if (recording()) Phase(group, "NCCL_ALLGATHER", args);
  TFRING_RETURN_IF_ERROR(GatherV(send, recv, layout.bytes_per_rank));
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  std::vector<DeviceCopy> pieces;
  pieces.reserve(layout.pieces.size());
  for (const GatherPiece& p : layout.pieces) {
    pieces.push_back({static_cast<char*>(group[p.tensor]->output) + p.to_offset,
                      recv + p.from_offset, p.bytes});
  }
  TFRING_RETURN_IF_ERROR(copier_.Copy(pieces, stream_));
  return Complete(what);
}

Status NcclExecutor::RunBroadcast(const std::vector<Entry*>& group, const Response& r) {
  TFRING_RETURN_IF_ERROR(EnsureReady(group));
  TFRING_RETURN_IF_ERROR(WaitInputs(group));
  const bool is_root = layout_.rank == r.root_rank;
  if (group.size() == 1) {
    Entry& e = *group[0];
    const int64_t bytes = TensorBytes(e.request);
    if (recording()) Phase(group, "NCCL_BROADCAST", Timeline::GroupArgs(group, bytes));
    if (bytes > 0) {
      TFRING_NCCL_LAUNCH(ncclBroadcast(e.input, e.output, bytes, ncclUint8, r.root_rank,
                                       world_.comm, stream_),
                         &world_);
    }
    return Complete("NCCL broadcast of '" + e.request.name + "'");
  }
  const Packed packed = PlanPacked(group);
  char* buffer;
  TFRING_RETURN_IF_ERROR(DeviceBuffer(0, packed.total_bytes, &buffer));
  if (recording()) Phase(group, "MEMCPY_IN_FUSION_BUFFER");
  if (is_root) TFRING_RETURN_IF_ERROR(PackInputs(group, packed, buffer));
  if (recording()) Phase(group, "NCCL_BROADCAST", Timeline::GroupArgs(group, packed.total_bytes));
  if (packed.total_bytes > 0) {
    TFRING_NCCL_LAUNCH(ncclBroadcast(buffer, buffer, packed.total_bytes, ncclUint8, r.root_rank,
                                     world_.comm, stream_),
                       &world_);
  }
  if (recording()) Phase(group, "MEMCPY_OUT_FUSION_BUFFER");
  TFRING_RETURN_IF_ERROR(UnpackOutputs(group, packed, buffer));
  return Complete("NCCL broadcast of " + std::to_string(group.size()) + " fused tensors, first '" +
                  r.name + "'");
}

Status NcclExecutor::RunReducescatter(const std::vector<Entry*>& group, const Response& r) {
  TFRING_RETURN_IF_ERROR(EnsureReady(group));
  TFRING_RETURN_IF_ERROR(WaitInputs(group));
  const size_t esize = DataTypeSize(r.dtype);
  const ncclDataType_t type = NcclType(r.dtype);
  for (Entry* e : group) {
    const int64_t row = RowBytes(e->request) / static_cast<int64_t>(esize);
    std::vector<int64_t> counts = ReducescatterRows(e->request.shape[0], layout_.size);
    for (int64_t& c : counts) c *= row;
    const int64_t total = NumElements(e->request.shape);
    Reduction plan;
    TFRING_RETURN_IF_ERROR(PlanReduction(r, world_, &plan));
    const char* in = static_cast<const char*>(e->input);
    Status s;
    if (plan.prescale_on_host != 1.0) {
      char* scaled = nullptr;
      s = DeviceBuffer(0, total * esize, &scaled);
      if (s.ok()) s = CopyAsync(scaled, in, total * esize);
      if (s.ok()) {
        s = ThroughHost(scaled, total * esize, "prescale it", [&](char* host) {
          ScaleInPlace(r.dtype, plan.prescale_on_host, host, total);
          return Status::OK();
        });
      }
      in = scaled;
    }
    if (recording()) Phase({e}, "NCCL_REDUCESCATTER", Timeline::GroupArgs({e}, total * esize));
    bool even = true;
    for (int64_t c : counts) even = even && c == counts[0];
    if (s.ok() && even && counts[0] > 0) {
      s = Launched(ncclReduceScatter(in, e->output, counts[0], type, plan.op, world_.comm, stream_),
                   "ncclReduceScatter", {&world_});
    } else if (s.ok() && !even) {
      // Uneven blocks: a reduce of each rank's block onto that rank, in one NCCL group.
      const ncclResult_t start = ncclGroupStart();
      ncclResult_t rc = start;
      int64_t offset = 0;
      for (int q = 0; q < layout_.size && (rc == ncclSuccess || rc == ncclInProgress); ++q) {
        rc = ncclReduce(in + offset * esize, e->output, counts[q], type, plan.op, q, world_.comm,
                        stream_);
        offset += counts[q];
      }
      const ncclResult_t end = ncclGroupEnd();
      s = Launched(rc, "ncclReduce", {&world_});
      if (s.ok()) s = Launched(end, "ncclGroupEnd", {&world_});
    }
    if (plan.premulsum && broken_.ok()) ncclRedOpDestroy(plan.op, world_.comm);
    TFRING_RETURN_IF_ERROR(s);
    const int64_t mine = counts[layout_.rank];
    if (plan.divide_on_host || plan.postscale_on_host != 1.0) {
      TFRING_RETURN_IF_ERROR(ThroughHost(e->output, mine * esize, "average or postscale it",
                                         [&](char* host) {
        if (plan.divide_on_host) DivideTowardZeroInPlace(r.dtype, layout_.size, host, mine);
        if (plan.postscale_on_host != 1.0) ScaleInPlace(r.dtype, plan.postscale_on_host, host, mine);
        return Status::OK();
      }));
    }
    TFRING_RETURN_IF_ERROR(Complete("NCCL reducescatter of '" + e->request.name + "'"));
  }
  return Status::OK();
}

Status NcclExecutor::RunAlltoall(const std::vector<Entry*>& group, const Response& r) {
  TFRING_RETURN_IF_ERROR(EnsureReady(group));
  TFRING_RETURN_IF_ERROR(WaitInputs(group));
  for (Entry* e : group) {
    const AlltoallLayout l = PlanAlltoall(*e, r, layout_.rank, layout_.size);
    TFRING_RETURN_IF_ERROR(e->set_received_splits(l.received_rows));
    TFRING_RETURN_IF_ERROR(e->allocate_output(l.output_shape, &e->output));
    TFRING_RETURN_IF_ERROR(WaitForProducerStream(*e));
    TFRING_RETURN_IF_ERROR(MarkInputsReady());
    if (recording()) Phase({e}, "NCCL_ALLTOALL", Timeline::GroupArgs({e}, TensorBytes(e->request)));
    // One send and one receive per peer, in one NCCL group.
    const ncclResult_t start = ncclGroupStart();
    ncclResult_t rc = start;
    int64_t soff = 0, roff = 0;
    for (int q = 0; q < layout_.size && (rc == ncclSuccess || rc == ncclInProgress); ++q) {
      if (l.send_bytes[q] > 0) {
        rc = ncclSend(static_cast<const char*>(e->input) + soff, l.send_bytes[q], ncclUint8, q,
                      world_.comm, stream_);
      }
      if ((rc == ncclSuccess || rc == ncclInProgress) && l.recv_bytes[q] > 0) {
        rc = ncclRecv(static_cast<char*>(e->output) + roff, l.recv_bytes[q], ncclUint8, q,
                      world_.comm, stream_);
      }
      soff += l.send_bytes[q];
      roff += l.recv_bytes[q];
    }
    const ncclResult_t end = ncclGroupEnd();
    TFRING_RETURN_IF_ERROR(Launched(rc, "ncclSend/ncclRecv", {&world_}));
    TFRING_RETURN_IF_ERROR(Launched(end, "ncclGroupEnd", {&world_}));
    TFRING_RETURN_IF_ERROR(Complete("NCCL alltoall of '" + e->request.name + "'"));
  }
  return Status::OK();
}

}  // namespace tfring
