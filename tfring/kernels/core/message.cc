#include "tfring/kernels/core/message.h"

#include <algorithm>
#include <cstring>

#include "tfring/kernels/core/byte_codec.h"

namespace tfring {
namespace {

// The first byte of every control-plane message. Ranks of one job run one build; a rank
// from another build (a different tfring on some host) is named instead of misread.
constexpr uint8_t kWireVersion = 4;

Status Corrupt(const char* what, int from_rank, const std::string& detail) {
  return Status::Internal(std::string("malformed ") + what + " message from rank " +
                          std::to_string(from_rank) + " on the control plane: " + detail);
}

Status CheckVersion(Reader* rd, const char* what, int from_rank) {
  uint8_t version;
  if (!rd->Get(&version)) return Corrupt(what, from_rank, "empty");
  if (version != kWireVersion) {
    return Corrupt(what, from_rank,
                   "wire format version " + std::to_string(version) + ", this rank speaks " +
                       std::to_string(kWireVersion) + " (are all ranks running the same tfring?)");
  }
  return Status::OK();
}

// The signature, written and read in one place for Requests and Responses.
void PutSignature(Writer* w, const Signature& m) {
  w->PutString(m.key.name);  // the key, not its string: the receiver makes that (KeyString)
  w->Put<int64_t>(m.key.unnamed);
  w->Put<int32_t>(m.key.part);
  w->Put<uint8_t>(static_cast<uint8_t>(m.kind));
  w->Put<uint8_t>(static_cast<uint8_t>(m.dtype));
  w->Put<uint8_t>(static_cast<uint8_t>(m.reduce_op));
  w->Put<uint8_t>(m.cacheable ? 1 : 0);
  w->Put<uint8_t>(m.on_device ? 1 : 0);
  w->Put<int32_t>(m.root_rank);
  w->Put<double>(m.prescale_factor);
  w->Put<double>(m.postscale_factor);
  w->PutInts(m.shape);
  w->PutRanks(m.key.set);
  w->Put<uint32_t>(static_cast<uint32_t>(m.parts.size()));
  for (const TensorPart& part : m.parts) {
    w->Put<uint8_t>(static_cast<uint8_t>(part.dtype));
    w->PutInts(part.shape);
  }
}

// "" when `ranks` are ranks of a job of `world_size` in ascending order (a process set,
// the joined ranks), else what is wrong: later code indexes arrays by them.
std::string CheckRanks(const std::vector<int32_t>& ranks, int world_size, const char* what) {
  if (AreAscendingRanks(ranks, world_size)) return "";
  return std::string(what) + " " + RankListString(ranks) +
         " are not ascending ranks of a job of size " + std::to_string(world_size);
}

// Reads what PutSignature wrote; "" when it is well formed, else what is wrong. Every enum
// is checked against its values and every rank against the job's size, so no later code
// sees one that does not exist.
std::string GetSignature(Reader* rd, int world_size, Signature* m) {
  uint8_t kind, dtype, op;
  std::string name;
  if (!rd->GetString(&name) || !rd->Get(&m->key.unnamed) || !rd->Get(&m->key.part) ||
      !rd->Get(&kind) || !rd->Get(&dtype) || !rd->Get(&op) ||
      !rd->GetBool(&m->cacheable) || !rd->GetBool(&m->on_device) || !rd->Get(&m->root_rank) ||
      !rd->Get(&m->prescale_factor) || !rd->Get(&m->postscale_factor) ||
      !rd->GetInts(&m->shape) || !rd->GetRanks(&m->key.set)) {
    return "truncated or damaged fields";
  }
  m->key.name = std::move(name);
  if (m->key.unnamed < -1 || m->key.part < -1) {
    return "tensor key with unnamed " + std::to_string(m->key.unnamed) + ", part " +
           std::to_string(m->key.part) + " (-1 or more)";
  }
  const std::string bad_set = CheckRanks(m->key.set, world_size, "process set");
  if (!bad_set.empty()) return bad_set;
  m->name = KeyString(m->key);
  if (kind > static_cast<uint8_t>(CollectiveKind::kJoin)) {
    return "unknown collective " + std::to_string(kind);
  }
  if (dtype >= kNumDataTypes) return "unknown dtype " + std::to_string(dtype);
  if (!IsValidReduceOp(op)) return "unknown reduce op " + std::to_string(op);
  if (m->root_rank < 0 || m->root_rank >= world_size) {
    return "root rank " + std::to_string(m->root_rank) + " of '" + m->name +
           "' outside a job of size " + std::to_string(world_size);
  }
  for (int64_t d : m->shape) {
    if (d < 0) return "negative dimension in the shape of '" + m->name + "'";
  }
  uint32_t parts;
  // Each part takes at least 5 bytes: a count checked against them allocates nothing absurd.
  if (!rd->Get(&parts) || !rd->Fits(static_cast<size_t>(parts) * 5)) {
    return "truncated or damaged parts";
  }
  m->parts.resize(parts);
  for (TensorPart& part : m->parts) {
    uint8_t part_dtype;
    if (!rd->Get(&part_dtype) || !rd->GetInts(&part.shape)) return "truncated or damaged parts";
    if (part_dtype >= kNumDataTypes) return "unknown dtype " + std::to_string(part_dtype);
    part.dtype = static_cast<DataType>(part_dtype);
    for (int64_t d : part.shape) {
      if (d < 0) return "negative dimension in a part of '" + m->name + "'";
    }
  }
  m->kind = static_cast<CollectiveKind>(kind);
  m->dtype = static_cast<DataType>(dtype);
  m->reduce_op = static_cast<ReduceOp>(op);
  return "";
}

}  // namespace

std::vector<int64_t> ReducescatterRows(int64_t rows, int size) {
  std::vector<int64_t> out(size, rows / size);
  for (int r = 0; r < rows % size; ++r) ++out[r];
  return out;
}

int64_t TensorBytes(const Signature& r) {
  return NumElements(r.shape) * static_cast<int64_t>(DataTypeSize(r.dtype));
}

int64_t RowBytes(const Signature& r) {
  int64_t n = static_cast<int64_t>(DataTypeSize(r.dtype));
  for (size_t d = 1; d < r.shape.size(); ++d) n *= r.shape[d];
  return n;
}

std::vector<int32_t> SetMembers(const std::vector<int32_t>& process_set, int world_size) {
  if (!process_set.empty()) return process_set;
  std::vector<int32_t> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  return all;
}

bool AreAscendingRanks(const std::vector<int32_t>& ranks, int world_size) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return false;
    }
  }
  return true;
}

bool IsMember(const std::vector<int32_t>& members, int rank) {
  return std::binary_search(members.begin(), members.end(), rank);
}

std::string RankListString(const std::vector<int32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string NotAMemberMessage(int rank, const std::vector<int32_t>& set,
                              const std::string& name) {
  return "rank " + std::to_string(rank) + " is not in the process set " + RankListString(set) +
         " of '" + name + "': only its members may submit it";
}

std::string StaleProcessSetMessage(const std::vector<int32_t>& set, const std::string& what) {
  return what + ": process set " + RankListString(set) +
         " was made before the job lost a worker (a tfring.elastic reset): the ranks have "
         "been renumbered since, so its ranks may name other processes. Make it again from "
         "the new ranks, in a reset callback (a tf.function traced with it must be traced "
         "again).";
}

bool Signature::SameCollective(const Signature& o) const {
  return kind == o.kind && dtype == o.dtype && reduce_op == o.reduce_op &&
         root_rank == o.root_rank && prescale_factor == o.prescale_factor &&
         postscale_factor == o.postscale_factor && shape == o.shape &&
         key.set == o.key.set && on_device == o.on_device && parts == o.parts;
}

bool MixedParts(const Signature& s) {
  for (const TensorPart& part : s.parts) {
    if (part.dtype != s.parts[0].dtype) return true;
  }
  return false;
}

Response ResponseTo(const Request& q) {
  Response r;
  static_cast<Signature&>(r) = q;
  r.cacheable = false;
  r.key.call_site.clear();  // a request's own; the negotiator sets shared_call_site
  return r;
}

Request SignatureOf(const Response& r) {
  Request q;
  static_cast<Signature&>(q) = r;
  return q;
}

int Contributors(const Response& r, int set_size) {
  return set_size - static_cast<int>(r.joined.size());
}

std::string EncodeRequests(const std::vector<Request>& requests) {
  Writer w;
  w.Put<uint8_t>(kWireVersion);
  w.Put<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const Request& r : requests) {
    PutSignature(&w, r);
    w.PutInts(r.splits);
    w.PutString(r.key.call_site);
  }
  return w.Take();
}

Status DecodeRequests(const std::string& bytes, int from_rank, int world_size,
                      std::vector<Request>* requests) {
  Reader rd(bytes);
  TFRING_RETURN_IF_ERROR(CheckVersion(&rd, "request", from_rank));
  uint32_t n;
  if (!rd.Get(&n)) return Corrupt("request", from_rank, "no request count");
  requests->clear();
  for (uint32_t i = 0; i < n; ++i) {
    Request r;
    std::string problem = GetSignature(&rd, world_size, &r);
    if (problem.empty() && (!rd.GetInts(&r.splits) || !rd.GetString(&r.key.call_site))) {
      problem = "truncated or damaged fields";
    }
    if (!problem.empty()) {
      return Corrupt("request", from_rank, "request " + std::to_string(i) + ": " + problem);
    }
    requests->push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : Corrupt("request", from_rank, "bytes after the last request");
}

std::string EncodeResponseList(const ResponseList& list) {
  Writer w;
  w.Put<uint8_t>(kWireVersion);
  w.PutString(list.abort_message);
  w.Put<uint8_t>(list.has_params ? 1 : 0);
  w.Put<int64_t>(list.fusion_threshold_bytes);
  w.Put<double>(list.cycle_time_ms);
  w.Put<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const Response& r : list.responses) {
    PutSignature(&w, r);
    w.PutInts(r.first_dims);
    w.PutInts(r.all_splits);
    w.PutRanks(r.joined);
    w.PutString(r.error);
    w.PutString(r.shared_call_site);
  }
  return w.Take();
}

Status DecodeResponseList(const std::string& bytes, int world_size, ResponseList* list) {
  constexpr int kFrom = 0;  // responses come from rank 0
  Reader rd(bytes);
  TFRING_RETURN_IF_ERROR(CheckVersion(&rd, "response", kFrom));
  uint32_t n;
  if (!rd.GetString(&list->abort_message) || !rd.GetBool(&list->has_params) ||
      !rd.Get(&list->fusion_threshold_bytes) || !rd.Get(&list->cycle_time_ms) || !rd.Get(&n)) {
    return Corrupt("response", kFrom, "truncated or damaged header");
  }
  list->responses.clear();
  for (uint32_t i = 0; i < n; ++i) {
    Response r;
    std::string problem = GetSignature(&rd, world_size, &r);
    if (problem.empty() && (!rd.GetInts(&r.first_dims) || !rd.GetInts(&r.all_splits) ||
                            !rd.GetRanks(&r.joined) || !rd.GetString(&r.error) ||
                            !rd.GetString(&r.shared_call_site))) {
      problem = "truncated or damaged fields";
    }
    if (problem.empty()) problem = CheckRanks(r.joined, world_size, "joined ranks");
    if (!problem.empty()) {
      return Corrupt("response", kFrom, "response " + std::to_string(i) + ": " + problem);
    }
    list->responses.push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : Corrupt("response", kFrom, "bytes after the last response");
}

}  // namespace tfring
