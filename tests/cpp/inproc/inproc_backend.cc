#include "tests/cpp/inproc/inproc_backend.h"

#include <cstring>
#include <utility>

#include "tfring/kernels/common/elementwise.h"

namespace tfring {

InprocBackend::InprocBackend(std::shared_ptr<InprocWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {}

Status InprocBackend::Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                                ReduceOp op) {
  if (op == ReduceOp::kAverage) return AverageReachedBackend("InprocBackend", "Allreduce");
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  // `in` may alias `out`, and peers read `in` during the exchange: reduce into a copy.
  std::vector<char> result(bytes);
  TFRING_RETURN_IF_ERROR(world_->Exchange(rank_, in, [&](const std::vector<const void*>& all) {
    if (bytes > 0) std::memcpy(result.data(), all[0], bytes);
    for (size_t r = 1; r < all.size(); ++r) ReduceInto(dtype, op, all[r], result.data(), count);
  }));
  if (bytes > 0) std::memcpy(out, result.data(), bytes);
  return Status::OK();
}

Status InprocBackend::Allgather(const void* in, void* out,
                                const std::vector<int64_t>& bytes_per_rank) {
  // `out` is this rank's own and never aliases an input, so it is written during the exchange.
  return world_->Exchange(rank_, in, [&](const std::vector<const void*>& all) {
    char* at = static_cast<char*>(out);
    for (size_t r = 0; r < all.size(); ++r) {
      if (bytes_per_rank[r] > 0) std::memcpy(at, all[r], bytes_per_rank[r]);
      at += bytes_per_rank[r];
    }
  });
}

Status InprocBackend::Broadcast(void* buffer, int64_t bytes, int root) {
  if (root < 0 || root >= world_->size()) {
    return Status::InvalidArgument("broadcast root " + std::to_string(root) +
                                   " is not a rank in [0, " + std::to_string(world_->size()) +
                                   ")");
  }
  return world_->Exchange(rank_, buffer, [&](const std::vector<const void*>& all) {
    if (rank_ != root && bytes > 0) std::memcpy(buffer, all[root], bytes);
  });
}

Status InprocBackend::Reducescatter(const void* in, void* out,
                                    const std::vector<int64_t>& counts, DataType dtype,
                                    ReduceOp op) {
  int64_t total = 0, offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) < rank_) offset += counts[r];
    total += counts[r];
  }
  std::vector<char> reduced(static_cast<size_t>(total) * DataTypeSize(dtype) + 1);
  TFRING_RETURN_IF_ERROR(Allreduce(in, reduced.data(), total, dtype, op));
  const size_t esize = DataTypeSize(dtype);
  if (counts[rank_] > 0) std::memcpy(out, reduced.data() + offset * esize, counts[rank_] * esize);
  return Status::OK();
}

Status InprocBackend::Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                               const std::vector<int64_t>& recv_bytes) {
  // Each rank shares its input and its send counts; each then copies its blocks out.
  struct Contribution {
    const void* in;
    const std::vector<int64_t>* send_bytes;
  } mine{in, &send_bytes};
  return world_->Exchange(rank_, &mine, [&](const std::vector<const void*>& all) {
    char* at = static_cast<char*>(out);
    for (size_t q = 0; q < all.size(); ++q) {
      const auto* peer = static_cast<const Contribution*>(all[q]);
      int64_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += (*peer->send_bytes)[r];
      if (recv_bytes[q] > 0) {
        std::memcpy(at, static_cast<const char*>(peer->in) + offset, recv_bytes[q]);
      }
      at += recv_bytes[q];
    }
  });
}

}  // namespace tfring
