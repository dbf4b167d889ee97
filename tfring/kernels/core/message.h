// What ranks tell rank 0 (Requests) and what rank 0 tells every rank (Responses), and the
// byte encoding both travel in: plain structs, the encoding and its checked decoding, and
// the pure functions every layer asks of them (set membership, sizes, the shared messages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"
#include "tfring/kernels/core/tensor_key.h"

namespace tfring {

// One tensor of a grouped allreduce that travels as one (Signature::parts).
struct TensorPart {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  bool operator==(const TensorPart& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorPart& o) const { return !(*this == o); }
};

// What identifies one collective: the fields every rank's request must agree on, that the
// response cache keys on, and that Requests and Responses both carry (encoded once, by one
// function, for both).
struct Signature {
  TensorKey key;  // which tensor, in which process set (tensor_key.h); `name` is its string
  // KeyString(key): the one string maps, the cache, errors and the timeline use.
  // Made when the tensor is queued (Coordinator::PrepareEntry) and when it is decoded.
  std::string name;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;  // allreduce and reducescatter
  int32_t root_rank = 0;                // broadcast only
  double prescale_factor = 1.0;         // allreduce and reducescatter
  double postscale_factor = 1.0;
  // A request: the submitting rank's shape. A response: the first member's (for allgather
  // and alltoall, rows are that member's own first dimension).
  Shape shape;
  // A request: false for auto-named eager ops, whose names never recur. A response: whether
  // every rank may cache it (set by the negotiator).
  bool cacheable = true;
  // Where the tensor lives: host memory (MPI) or a GPU (NCCL). Every rank must agree, since
  // the two take different backends; which GPU is each rank's own business.
  bool on_device = false;
  // A grouped allreduce of host tensors travels as one tensor, a "unit": its kernel packs
  // the op's tensors into one buffer (PlanParts, buffer_layout.h) and submits that, so the
  // runtime takes, negotiates, caches, reduces and completes one entry per op, not one per
  // tensor. `parts` lists the tensors, in order; `shape` is then [the buffer's elements] of
  // `dtype`, the tensors' common dtype, or kUInt8 (bytes) when they differ (MixedParts).
  // Empty for every other collective.
  std::vector<TensorPart> parts;

  bool operator==(const Signature& o) const { return name == o.name && SameButName(o); }
  bool operator!=(const Signature& o) const { return !(*this == o); }
  // Every field but the name.
  bool SameButName(const Signature& o) const {
    return cacheable == o.cacheable && SameCollective(o);
  }
  // Every field but the name and `cacheable`: the same collective, whoever may cache it.
  bool SameCollective(const Signature& o) const;
};

// One rank's description of one tensor it has submitted.
struct Request : Signature {
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank of the process set

  // Whether two requests describe the same collective (what the response cache keys on).
  bool SameSignature(const Request& other) const {
    return name == other.name && SameButName(other);
  }
  bool SameButName(const Request& other) const {
    return Signature::SameButName(other) && splits == other.splits;
  }
  bool SameCollective(const Request& other) const {
    return Signature::SameCollective(other) && splits == other.splits;
  }
};

// Rank 0's decision about one tensor, executed by every rank in list order.
struct Response : Signature {
  Response() { cacheable = false; }  // only the negotiator decides that a response may be cached

  std::vector<int64_t> first_dims;  // allgather: first dimension of each rank's tensor
  // alltoall: every rank's splits, rank after rank (rows rank q sends to rank r at q*size+r)
  std::vector<int64_t> all_splits;
  // Ranks of the set that had joined (tfring.join) instead of submitting: they contribute
  // the reduction's identity (allgather: no rows), and Average divides by the others only.
  std::vector<int32_t> joined;
  std::string error;  // non-empty: fail the op on every rank with this message
  // Unnamed eager calls that every rank made at one call site (each request's key.call_site):
  // that site. The response is cached under it (UnnamedCacheKey), so that later calls made
  // there, which get new names, find it. Empty otherwise.
  std::string shared_call_site;

  bool ok() const { return error.empty(); }
};

// The global ranks of a request's or response's process set (`all` ranks when empty).
std::vector<int32_t> SetMembers(const std::vector<int32_t>& process_set, int world_size);
// Whether `rank` is in `members` (ascending).
bool IsMember(const std::vector<int32_t>& members, int rank);
// Whether `ranks` are distinct ranks of a job of `world_size`, ascending (a process set's
// members, the joined ranks).
bool AreAscendingRanks(const std::vector<int32_t>& ranks, int world_size);
// "[0, 2]".
std::string RankListString(const std::vector<int32_t>& ranks);
// The error for a rank that submits `name` in a process set it is not a member of: one
// message wherever it is caught (a TF kernel, an XLA lowering, the coordinator).
std::string NotAMemberMessage(int rank, const std::vector<int32_t>& set,
                              const std::string& name);
// The error for a process set made before a tfring.elastic reset renumbered the ranks,
// used by `what` (an op's "'name'", or Python's function name): one message wherever it
// is caught (a TF kernel, an XLA call, Python's check).
std::string StaleProcessSetMessage(const std::vector<int32_t>& set, const std::string& what);
// Whether `q` is cached by its call site: an unnamed eager call of one tensor (the tensors
// of a grouped call share a call site and are not).
inline bool CachedByCallSite(const Request& q) {
  return q.key.unnamed >= 0 && q.key.part < 0 && !q.key.call_site.empty();
}
// The response to `q` that carries q's signature, not yet cacheable; the negotiator fills
// in the rest.
Response ResponseTo(const Request& q);
// The request that a response answers, as the response cache compares them: what a rank
// that holds no entry of its own (a joined rank, a rank outside the set) records.
Request SignatureOf(const Response& r);
// How many ranks' data an Average divides by: the set's members minus the joined ones.
int Contributors(const Response& r, int set_size);

// How a reducescatter splits `rows` rows over `size` ranks (Horovod's split): as evenly as
// possible, the first rows % size ranks taking one row more.
std::vector<int64_t> ReducescatterRows(int64_t rows, int size);

// Whether a unit's tensors (Signature::parts) differ in dtype: such a unit is reduced dtype
// by dtype and never fused with other tensors.
bool MixedParts(const Signature& s);

// Bytes of the whole tensor, and of one row (all dimensions but the first).
int64_t TensorBytes(const Signature& r);
int64_t RowBytes(const Signature& r);

// Sent by rank 0 after each full negotiation round.
struct ResponseList {
  std::vector<Response> responses;
  std::string abort_message;  // non-empty: every rank fails all pending ops and stops
  // The autotuner's next setting (rank 0's), in force on every rank from this cycle on.
  bool has_params = false;
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
};

// The control-plane wire format: a version byte, then the messages; the fields Requests
// and Responses share are encoded by one function for both. Decoding checks every length
// against the bytes left, every enum against its values and every rank (root, process set,
// joined) against `world_size`; a malformed message is an Internal error naming the rank
// that sent it (`from_rank`; responses come from rank 0).
std::string EncodeRequests(const std::vector<Request>& requests);
Status DecodeRequests(const std::string& bytes, int from_rank, int world_size,
                      std::vector<Request>* requests);
std::string EncodeResponseList(const ResponseList& list);
Status DecodeResponseList(const std::string& bytes, int world_size, ResponseList* list);

}  // namespace tfring
