#include "tfring/kernels/backends/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "tfring/kernels/backends/mpi/mpi_check.h"

namespace tfring {
namespace {

MPI_Op NativeOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

constexpr int64_t kMaxChunk = INT_MAX / 8;  // elements per MPI call: counts are ints

// From this many bytes a reducescatter runs tfring's ring (RingReducescatter) instead of
// MPI_Reduce_scatter, which in Open MPI 5.0 is slower than its own allreduce for large
// buffers; below it, the ring's size-1 latency-bound steps cost more than MPI's algorithms
// (docs/benchmarks-sharded.md, 'Second sitting').
constexpr int64_t kRingReducescatterBytes = 256 * 1024;
// The ring's messages: tfring's communicator carries no other point-to-point traffic.
constexpr int kRingTag = 0x7472;

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiBackend::~MpiBackend() {
  own_.Free();
  MPI_Comm_free(&comm_);
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
}

void MpiBackend::UseHierarchicalAllreduce(MPI_Comm local, MPI_Comm cross) {
  local_ = local;
  cross_ = cross;
}

Status MpiBackend::HierarchicalAllreduce(const void* in, void* out, int count,
                                         MPI_Datatype type, MPI_Op op) {
  int local_rank = 0, cross_size = 1;
  TFRING_MPI_CHECK(MPI_Comm_rank(local_, &local_rank));
  TFRING_MPI_CHECK(MPI_Comm_size(cross_, &cross_size));
  const bool leader = local_rank == 0;
  // The leader reduces into `out`; the others only send.
  const void* send = (leader && in == out) ? MPI_IN_PLACE : in;
  TFRING_MPI_CHECK(MPI_Reduce(send, out, count, type, op, 0, local_));
  if (leader && cross_size > 1) {
    TFRING_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, out, count, type, op, cross_));
  }
  TFRING_MPI_CHECK(MPI_Bcast(out, count, type, 0, local_));
  return Status::OK();
}

Status MpiBackend::Init() { return own_.Create(); }

MPI_Op MpiBackend::OpFor(DataType dtype, ReduceOp op) const {
  const MPI_Op own = own_.op(dtype, op);
  return own != MPI_OP_NULL ? own : NativeOp(op);
}

Status MpiBackend::Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                             ReduceOp op) {
  if (op == ReduceOp::kAverage) return AverageReachedBackend("MpiBackend", "Allreduce");
  const MPI_Datatype type = own_.type(dtype);
  const MPI_Op mpi_op = OpFor(dtype, op);
  const size_t esize = DataTypeSize(dtype);
  for (int64_t done = 0; done < count || (count == 0 && done == 0); done += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - done));
    char* o = static_cast<char*>(out) + done * esize;
    const char* i = static_cast<const char*>(in) + done * esize;
    if (local_ != MPI_COMM_NULL) {
      TFRING_RETURN_IF_ERROR(HierarchicalAllreduce(i, o, n, type, mpi_op));
    } else {
      TFRING_MPI_CHECK(MPI_Allreduce(i == o ? MPI_IN_PLACE : i, o, n, type, mpi_op, comm_));
    }
    if (count == 0) break;
  }
  return Status::OK();
}

Status MpiBackend::Allgather(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) {
  std::vector<int> counts(size_), displs(size_);
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    if (bytes_per_rank[r] > INT_MAX || total > INT_MAX) {
      return Status::InvalidArgument(
          "allgather of more than 2 GiB per call is not supported by the MPI backend; split "
          "the tensor");
    }
    counts[r] = static_cast<int>(bytes_per_rank[r]);
    displs[r] = static_cast<int>(total);
    total += bytes_per_rank[r];
  }
  TFRING_MPI_CHECK(MPI_Allgatherv(in, counts[rank_], MPI_BYTE, out, counts.data(), displs.data(),
                                  MPI_BYTE, comm_));
  return Status::OK();
}

Status MpiBackend::Broadcast(void* buffer, int64_t bytes, int root) {
  for (int64_t done = 0; done < bytes; done += INT_MAX) {
    const int n = static_cast<int>(std::min<int64_t>(INT_MAX, bytes - done));
    TFRING_MPI_CHECK(MPI_Bcast(static_cast<char*>(buffer) + done, n, MPI_BYTE, root, comm_));
  }
  return Status::OK();
}

Status MpiBackend::Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                 DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) return AverageReachedBackend("MpiBackend", "Reducescatter");
  const MPI_Datatype type = own_.type(dtype);
  const MPI_Op mpi_op = OpFor(dtype, op);
  std::vector<int> recvcounts(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > INT_MAX) {
      return Status::InvalidArgument("reducescatter blocks of more than 2^31-1 elements are "
                                     "not supported (rank " + std::to_string(r) + " would get " +
                                     std::to_string(counts[r]) + ")");
    }
    recvcounts[r] = static_cast<int>(counts[r]);
  }
  int64_t total_bytes = 0;
  for (int64_t c : counts) total_bytes += c * static_cast<int64_t>(DataTypeSize(dtype));
  if (size_ > 1 && total_bytes >= kRingReducescatterBytes) {
    return RingReducescatter(in, out, recvcounts, dtype, type, mpi_op);
  }
  TFRING_MPI_CHECK(MPI_Reduce_scatter(in, out, recvcounts.data(), type, mpi_op, comm_));
  return Status::OK();
}

// Rank r ends with block r. In step s (0 .. size-2) it sends its running sum of block
// r-s-1 to rank r+1 and receives rank r-1's running sum of block r-s-2, to which it adds
// its own part of that block; the last block received is its own, received into `out`.
// Each rank sends (size-1)/size of the buffer once, as half of a ring allreduce does.
Status MpiBackend::RingReducescatter(const void* in, void* out, const std::vector<int>& counts,
                                     DataType dtype, MPI_Datatype type, MPI_Op op) {
  const size_t esize = DataTypeSize(dtype);
  std::vector<int64_t> offsets(size_, 0);
  int largest = 0;
  for (int r = 0; r < size_; ++r) {
    if (r > 0) offsets[r] = offsets[r - 1] + counts[r - 1];
    largest = std::max(largest, counts[r]);
  }
  // Two running sums alternate: one is sent while the next is received. Kept between
  // calls: a fresh buffer of this size costs its page faults on every step.
  const size_t half = static_cast<size_t>(largest) * esize;
  if (ring_scratch_.size() < 2 * half) ring_scratch_.resize(2 * half);
  char* sums[2] = {ring_scratch_.data(), ring_scratch_.data() + half};
  const char* input = static_cast<const char*>(in);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  const void* sending = nullptr;
  for (int s = 0; s < size_ - 1; ++s) {
    const int sent = (rank_ - s - 1 + 2 * size_) % size_;
    const int received = (rank_ - s - 2 + 2 * size_) % size_;
    if (s == 0) sending = input + offsets[sent] * esize;
    void* into = s == size_ - 2 ? out : sums[s % 2];
    TFRING_MPI_CHECK(MPI_Sendrecv(sending, counts[sent], type, next, kRingTag, into,
                                  counts[received], type, prev, kRingTag, comm_,
                                  MPI_STATUS_IGNORE));
    TFRING_MPI_CHECK(MPI_Reduce_local(input + offsets[received] * esize, into,
                                      counts[received], type, op));
    sending = into;
  }
  return Status::OK();
}

Status MpiBackend::Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                            const std::vector<int64_t>& recv_bytes) {
  std::vector<int> scounts(size_), sdispls(size_), rcounts(size_), rdispls(size_);
  int64_t soff = 0, roff = 0;
  for (int r = 0; r < size_; ++r) {
    if (soff + send_bytes[r] > INT_MAX || roff + recv_bytes[r] > INT_MAX) {
      return Status::InvalidArgument("alltoall of more than 2^31-1 bytes per rank is not "
                                     "supported over MPI");
    }
    scounts[r] = static_cast<int>(send_bytes[r]);
    sdispls[r] = static_cast<int>(soff);
    rcounts[r] = static_cast<int>(recv_bytes[r]);
    rdispls[r] = static_cast<int>(roff);
    soff += send_bytes[r];
    roff += recv_bytes[r];
  }
  TFRING_MPI_CHECK(MPI_Alltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out,
                                 rcounts.data(), rdispls.data(), MPI_BYTE, comm_));
  return Status::OK();
}

}  // namespace tfring
