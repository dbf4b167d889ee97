#include "tfring/kernels/core/negotiator.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/unnamed_names.h"

namespace tfring {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string Mismatch(const std::string& what, const std::string& name, int r0,
                     const std::string& v0, int r, const std::string& v) {
  return "Mismatched " + what + " for tensor '" + name + "': rank " + std::to_string(r0) +
         " sent " + v0 + ", rank " + std::to_string(r) + " sent " + v;
}

// For grouped allreduces that travel as one unit (Signature::parts): how two ranks' units
// differ, said of the first tensor that differs (they differ). Checked before the unit's
// own dtype and shape, which only summarize its parts.
std::string PartsMismatch(const std::string& name, int r0, const Request& first, int r,
                          const Request& req) {
  auto count = [](const Request& q) {
    return q.parts.empty() ? std::string("one tensor (not a grouped allreduce)")
                           : "a grouped allreduce of " + std::to_string(q.parts.size()) +
                                 " tensors";
  };
  if (req.parts.size() != first.parts.size()) {
    return "Mismatched tensor counts for '" + name + "': rank " + std::to_string(r0) + " sent " +
           count(first) + ", rank " + std::to_string(r) + " sent " + count(req);
  }
  for (size_t i = 0; i < first.parts.size(); ++i) {
    const TensorPart& a = first.parts[i];
    const TensorPart& b = req.parts[i];
    const std::string part = KeyString(PartKey(first.key, i));
    if (a.dtype != b.dtype) {
      return Mismatch("data types", part, r0, DataTypeName(a.dtype), r, DataTypeName(b.dtype));
    }
    if (a.shape != b.shape) {
      return Mismatch("shapes", part, r0, ShapeToString(a.shape), r, ShapeToString(b.shape));
    }
  }
  return "Mismatched tensors for '" + name + "'";  // not reached: some part differs
}

// For a mismatch between unnamed eager calls, which were paired by their order: which call
// each rank made, and what that means.
std::string CallSitesNote(int r0, const std::string& site0, int r, const std::string& site) {
  if (site0.empty() && site.empty()) return "";
  auto where = [](const std::string& s) { return s.empty() ? std::string("a named op") : s; };
  return ". Rank " + std::to_string(r0) + " made this call at " + where(site0) + ", rank " +
         std::to_string(r) + " at " + where(site) +
         ": unnamed eager collectives pair in the order each rank makes them, so the ranks' "
         "sequences of calls have drifted apart (one rank made a call the other did not). Give "
         "such calls name=, or make every rank make the same calls";
}

}  // namespace

void Negotiator::WarnPairedCallSites(const std::string& name, int r0, const std::string& site0,
                                     int r, const std::string& site) const {
  // Different lines may be legitimate (a rank-dependent branch around the same collective),
  // so this is a warning, once per pair of lines.
  if (warned_site_pairs_.size() >= 16 || !warned_site_pairs_.insert(site0 + "|" + site).second) {
    return;
  }
  TFRING_LOG(kWarning) << "unnamed eager collective '" << name << "' paired rank " << r0
                       << "'s call at " << site0 << " with rank " << r << "'s call at " << site
                       << ". Unnamed eager calls pair in the order each rank makes them; if "
                          "these are not meant to be the same collective, the ranks' calls "
                          "have drifted apart: give them name=.";
}

Negotiator::Negotiator(int size) : size_(size), joined_(size, false) {}

void Negotiator::SetJoined(const std::vector<bool>& joined) {
  joined_ = joined;
  for (auto& kv : pending_) MaybeComplete(kv.first, &kv.second);
}

void Negotiator::MaybeComplete(const std::string& name, Slot* slot) {
  if (slot->complete) return;
  for (int32_t m : slot->members) {
    if (!slot->present[m] && !joined_[m]) return;
  }
  slot->complete = true;
  completed_order_.push_back(name);
}

void Negotiator::Add(int rank, const Request& request, SteadyClock::time_point now) {
  auto it = pending_.find(request.name);
  if (it == pending_.end()) {
    Slot slot;
    slot.members = SetMembers(request.key.set, size_);
    slot.by_rank.resize(size_);
    slot.present.assign(size_, false);
    slot.since.resize(size_);
    slot.first_seen = now;
    it = pending_.emplace(request.name, std::move(slot)).first;
  }
  Slot& slot = it->second;
  TFRING_CHECK(!slot.present[rank]) << "rank " << rank << " submitted '" << request.name
                                    << "' twice";
  slot.by_rank[rank] = request;
  slot.present[rank] = true;
  slot.since[rank] = now;
  ++slot.count;
  MaybeComplete(request.name, &slot);
}

std::vector<Response> Negotiator::TakeReady() {
  std::vector<Response> out;
  out.reserve(completed_order_.size());
  for (const std::string& name : completed_order_) {
    auto it = pending_.find(name);
    out.push_back(Validate(it->second));
    pending_.erase(it);
  }
  completed_order_.clear();
  return out;
}

Response Negotiator::Validate(const Slot& slot) const {
  // The members that submitted, in rank order; the others have joined.
  std::vector<int32_t> present;
  for (int32_t m : slot.members) {
    if (slot.present[m]) present.push_back(m);
  }
  const int r0 = present[0];
  const Request& first = slot.by_rank[r0];
  Response resp = ResponseTo(first);
  for (int32_t m : slot.members) {
    if (!slot.present[m]) resp.joined.push_back(m);
  }
  // Gathered sizes may change from call to call; and a response with joined ranks holds
  // for this call only.
  resp.cacheable = first.kind != CollectiveKind::kAllgather && resp.joined.empty();
  const bool reduces = first.kind == CollectiveKind::kAllreduce ||
                       first.kind == CollectiveKind::kReducescatter;
  const std::string& n = first.name;
  // An unnamed eager call (only those carry a call site) has a new name every time: its
  // response is cached under the call site, when every rank made it at the same one.
  const bool unnamed = CachedByCallSite(first);
  for (int32_t r : present) {
    const Request& req = slot.by_rank[r];
    resp.cacheable =
        resp.cacheable && (unnamed ? req.key.call_site == first.key.call_site : req.cacheable);
    if (r == r0) continue;
    if (req.kind != first.kind) {
      resp.error = Mismatch("collectives", n, r0, CollectiveKindName(first.kind), r,
                            CollectiveKindName(req.kind));
    } else if (req.on_device != first.on_device) {
      resp.error = Mismatch("devices", n, r0, first.on_device ? "GPU" : "CPU", r,
                            req.on_device ? "GPU" : "CPU") +
                   " (place the tensor on the same kind of device on every rank)";
    } else if (req.parts != first.parts) {
      resp.error = PartsMismatch(n, r0, first, r, req);
    } else if (req.dtype != first.dtype) {
      resp.error = Mismatch("data types", n, r0, DataTypeName(first.dtype), r,
                            DataTypeName(req.dtype));
    } else if (first.kind == CollectiveKind::kAllgather ||
               first.kind == CollectiveKind::kAlltoall) {
      bool same = req.shape.size() == first.shape.size();
      for (size_t d = 1; same && d < req.shape.size(); ++d) same = req.shape[d] == first.shape[d];
      if (!same) {
        resp.error = Mismatch("shapes", n, r0, ShapeToString(first.shape), r,
                              ShapeToString(req.shape)) +
                     " (" + CollectiveKindName(first.kind) +
                     " needs every dimension but the first to agree)";
      }
    } else if (req.shape != first.shape) {
      resp.error = Mismatch("shapes", n, r0, ShapeToString(first.shape), r,
                            ShapeToString(req.shape));
    } else if (reduces && req.reduce_op != first.reduce_op) {
      resp.error = Mismatch("reduce ops", n, r0, ReduceOpName(first.reduce_op), r,
                            ReduceOpName(req.reduce_op));
    } else if (reduces && req.prescale_factor != first.prescale_factor) {
      resp.error = Mismatch("prescale_factor", n, r0, Num(first.prescale_factor), r,
                            Num(req.prescale_factor));
    } else if (reduces && req.postscale_factor != first.postscale_factor) {
      resp.error = Mismatch("postscale_factor", n, r0, Num(first.postscale_factor), r,
                            Num(req.postscale_factor));
    } else if (first.kind == CollectiveKind::kBroadcast && req.root_rank != first.root_rank) {
      resp.error = Mismatch("root ranks", n, r0, "root_rank=" + std::to_string(first.root_rank),
                            r, "root_rank=" + std::to_string(req.root_rank));
    }
    if (!resp.error.empty()) {
      resp.error += CallSitesNote(r0, first.key.call_site, r, req.key.call_site);
      break;
    }
    if (req.key.call_site != first.key.call_site) WarnPairedCallSites(n, r0, first.key.call_site, r,
                                                              req.key.call_site);
  }
  if (resp.ok()) resp.error = JoinedProblem(resp);
  if (resp.ok() && first.kind == CollectiveKind::kAllgather) {
    for (int32_t m : slot.members) {
      resp.first_dims.push_back(slot.present[m] ? slot.by_rank[m].shape[0] : 0);
    }
  }
  if (resp.ok() && first.kind == CollectiveKind::kAlltoall) {
    resp.cacheable = false;  // the splits may change from call to call
    const size_t set_size = slot.members.size();
    for (int32_t r : present) {
      const std::vector<int64_t>& splits = slot.by_rank[r].splits;
      if (splits.size() != set_size) {
        resp.error = "alltoall '" + n + "': rank " + std::to_string(r) + " sent " +
                     std::to_string(splits.size()) + " splits for " + std::to_string(set_size) +
                     " ranks";
        break;
      }
      resp.all_splits.insert(resp.all_splits.end(), splits.begin(), splits.end());
    }
  }
  if (!resp.ok()) resp.cacheable = false;
  if (resp.cacheable && unnamed) resp.shared_call_site = first.key.call_site;
  return resp;
}

std::vector<Negotiator::Stalled> Negotiator::PendingOlderThan(double min_age_seconds,
                                                              SteadyClock::time_point now) const {
  std::vector<Stalled> out;
  for (const auto& kv : pending_) {
    const double age = std::chrono::duration<double>(now - kv.second.first_seen).count();
    if (age < min_age_seconds || kv.second.complete) continue;
    Stalled s{kv.first, {}, {}, age, ""};
    for (int32_t r : kv.second.members) {
      (kv.second.present[r] ? s.submitted : s.missing).push_back(r);
      if (kv.second.present[r] && s.call_site.empty()) s.call_site = kv.second.by_rank[r].key.call_site;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Negotiator::Drift> Negotiator::FindDrifts(double min_age_seconds,
                                                      SteadyClock::time_point now) const {
  std::vector<std::pair<const std::string*, const Slot*>> old;
  for (const auto& kv : pending_) {
    const double age = std::chrono::duration<double>(now - kv.second.first_seen).count();
    if (!kv.second.complete && age >= min_age_seconds) old.push_back({&kv.first, &kv.second});
  }
  std::vector<Drift> out;
  std::set<const Slot*> taken;
  // S and T, with rank a waiting in S (an unnamed eager call: only those carry a call site)
  // and missing from T, rank b the other way round.
  auto waited = [&](const Slot* slot, int32_t r) {
    return std::chrono::duration<double>(now - slot->since[r]).count() >= min_age_seconds;
  };
  auto find_t = [&](const Slot* s, int32_t a, int32_t b) -> const std::string* {
    for (const auto& [t_key, t] : old) {
      if (t != s && !taken.count(t) && t->present[b] && waited(t, b) && !t->present[a] &&
          std::find(t->members.begin(), t->members.end(), a) != t->members.end()) {
        return t_key;
      }
    }
    return nullptr;
  };
  for (const auto& [s_key, s] : old) {
    for (int32_t a : s->members) {
      if (taken.count(s) || !s->present[a] || s->by_rank[a].key.call_site.empty() ||
          !waited(s, a)) {
        continue;
      }
      for (int32_t b : s->members) {
        if (s->present[b] || joined_[b]) continue;
        if (const std::string* t_key = find_t(s, a, b)) {
          out.push_back({*s_key, *t_key, a, b});
          taken.insert(s);
          taken.insert(&pending_.at(*t_key));
          break;
        }
      }
    }
  }
  return out;
}

bool Negotiator::HasDrifted(double min_age_seconds, SteadyClock::time_point now) const {
  return !FindDrifts(min_age_seconds, now).empty();
}

std::vector<Response> Negotiator::TakeDrifted(double min_age_seconds,
                                              SteadyClock::time_point now) {
  std::vector<Response> out;
  for (const Drift& d : FindDrifts(min_age_seconds, now)) {
    if (!pending_.count(d.waits_unnamed) || !pending_.count(d.waits_other)) continue;
    const Request& s = pending_.at(d.waits_unnamed).by_rank[d.unnamed_rank];
    const Request& t = pending_.at(d.waits_other).by_rank[d.other_rank];
    auto call = [](const Request& r) {
      return std::string(CollectiveKindName(r.kind)) + " '" + r.name + "'" +
             (r.key.call_site.empty() ? "" : " (an unnamed call at " + r.key.call_site + ")");
    };
    const int a = d.unnamed_rank, b = d.other_rank;
    const std::string as = std::to_string(a), bs = std::to_string(b);
    const std::string error =
        "The ranks' calls have drifted apart and wait on each other: rank " + as +
        " waits in " + call(s) + ", which rank " + bs + " has not made, while rank " + bs +
        " waits in " + call(t) + ", which rank " + as + " has not made. Unnamed eager " +
        "collectives pair in the order each rank makes them, so one rank made a call the " +
        "other did not. Give such calls name=, or make every rank make the same calls (both " +
        "calls fail here; later calls pair again)";
    // Every part of the two calls (a grouped op's tensors are pending one by one).
    auto same_call = [](const Request& x, const Request& y) { return x.key.SameOp(y.key); };
    std::vector<std::string> s_parts, t_parts;  // sorted below: S's parts, then T's
    for (const auto& kv : pending_) {
      const Slot& x = kv.second;
      if (x.complete) continue;
      if (x.present[a] && !x.present[b] && same_call(x.by_rank[a], s)) {
        s_parts.push_back(kv.first);
      }
      if (x.present[b] && !x.present[a] && same_call(x.by_rank[b], t)) {
        t_parts.push_back(kv.first);
      }
    }
    std::sort(s_parts.begin(), s_parts.end());
    std::sort(t_parts.begin(), t_parts.end());
    for (const auto& [parts, r] : {std::make_pair(&s_parts, a), std::make_pair(&t_parts, b)}) {
      for (const std::string& key : *parts) {
        Response resp = ResponseTo(pending_.at(key).by_rank[r]);
        resp.error = error;
        out.push_back(std::move(resp));
        pending_.erase(key);
      }
    }
  }
  return out;
}

std::string JoinedProblem(const Response& r) {
  if (r.joined.empty()) return "";
  const std::string who = "rank(s) " + RankListString(r.joined) + " have joined (tfring.join)";
  if (r.kind == CollectiveKind::kAlltoall) {
    return "alltoall '" + r.name + "' cannot run while " + who +
           ": a joined rank has no rows to send. Call join() after the last alltoall.";
  }
  if (r.kind == CollectiveKind::kReducescatter) {
    // As Horovod: a joined rank would be handed a block of the result that no one uses,
    // and shard_optimizer_state=True would lose that block's update.
    return "reducescatter '" + r.name + "' cannot run while " + who +
           ": every rank must hold its block of the result (uneven data with "
           "shard_optimizer_state=True: give every rank the same number of batches). Call "
           "join() after the last reducescatter.";
  }
  if (r.kind == CollectiveKind::kBroadcast) {
    for (int32_t j : r.joined) {
      if (j == r.root_rank) {
        return "broadcast '" + r.name + "': its root rank " + std::to_string(r.root_rank) +
               " has joined (tfring.join) and has nothing to send";
      }
    }
  }
  if (r.on_device) {
    return "tensor '" + r.name + "' is in GPU memory and " + who +
           "; join() covers host (CPU) tensors only in this version. On GPUs, give every rank "
           "the same number of steps (repeat or cut each rank's data to a common number of "
           "batches, e.g. fit's steps_per_epoch), or make the collectives that may run after "
           "a rank has joined on CPU tensors (tf.device('/CPU:0'))";
  }
  return "";
}

std::string DescribeStalled(const std::vector<Negotiator::Stalled>& stalled) {
  std::string s;
  for (size_t i = 0; i < stalled.size(); ++i) {
    if (i == 8) {
      s += "; and " + std::to_string(stalled.size() - i) + " more";
      break;
    }
    const auto& t = stalled[i];
    s += (i ? "; '" : "'") + t.name + "'" +
         (t.call_site.empty() ? "" : " (an unnamed call at " + t.call_site + ")") +
         " (submitted by ranks " + RankListString(t.submitted) +
         ", missing on ranks " + RankListString(t.missing) + ", waiting " +
         std::to_string(static_cast<int>(t.waited_seconds)) + " s)";
  }
  return s;
}

std::string StallShutdownNote(double shutdown_seconds) {
  if (shutdown_seconds <= 0) {
    return "TFRING_STALL_SHUTDOWN_TIME_SECONDS=0: they will wait for ever.";
  }
  return "If they are still stalled after TFRING_STALL_SHUTDOWN_TIME_SECONDS=" +
         std::to_string(static_cast<int64_t>(shutdown_seconds)) +
         " s, every rank fails its ops and tfring stops (raise it, or 0 to wait for ever, when "
         "one rank legitimately works alone that long).";
}

}  // namespace tfring
