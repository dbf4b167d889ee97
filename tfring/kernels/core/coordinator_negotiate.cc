// The coordinator's side of a negotiation round (the round itself, rank 0's decisions and
// the stall checks, is negotiation_round.h): this rank's new requests sent, and rank 0's
// responses recorded in every rank's response cache in the same order, with what that
// changes for this rank's pending entries. The cycle around it is in coordinator.cc.
#include <chrono>
#include <string>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/coordinator.h"

namespace tfring {

Status Coordinator::Negotiate(CycleResponses* execute, bool* stop) {
  std::vector<Request> mine;
  for (const std::string& name : send_order_) {
    auto it = pending_.by_name().find(name);
    if (it == pending_.by_name().end() || it->second.state != State::kToSend) continue;
    it->second.state = State::kSent;
    mine.push_back(it->second.entry.request);
  }
  send_order_.clear();

  ResponseList list;
  TFRING_RETURN_IF_ERROR(round_.Run(control_plane_.get(), mine, &list));
  ApplyParams(list);
  for (Response& r : list.responses) {
    // Every rank records it, members of its set or not, so that caches stay identical.
    if (r.ok() && r.cacheable) {
      int evicted;
      if (r.shared_call_site.empty()) {
        evicted = cache_.Put(r, SignatureOf(r));
      } else {
        Response under_site = r;  // unnamed calls: under their call site (TakeNewEntries)
        under_site.name = UnnamedCacheKey(r.shared_call_site, r.key.set);
        evicted = cache_.Put(under_site, SignatureOf(under_site));
      }
      if (evicted >= 0) Evicted(evicted);
    }
    // Numbers of later unnamed calls agree again: after a call that failed (before it
    // returns to its caller), and after one this rank sat out while joined.
    if (!r.ok() || std::find(r.joined.begin(), r.joined.end(), rank_) != r.joined.end()) {
      unnamed_names_.CatchUp(r.key);
    }
    execute->Add(std::move(r));
  }
  if (!list.abort_message.empty()) {
    TFRING_LOG(kError) << list.abort_message;
    Execute(execute->order);
    *execute = CycleResponses();
    FailEverything(Status::Aborted(list.abort_message));
    *stop = true;
  }
  return Status::OK();
}

void Coordinator::Evicted(int slot) {
  // This rank's entry waiting on it was not ready everywhere (a slot executed in this cycle
  // is never taken): negotiated from the next cycle on, as the other ranks' will be.
  if (pending_.AtSlot(slot)) NegotiateInstead(slot);
  if (rank_ != 0 || eviction_warned_) return;
  eviction_warned_ = true;
  TFRING_LOG(kWarning) << "tfring's response cache is full (TFRING_CACHE_CAPACITY="
                       << options_.cache_capacity
                       << " tensors): a newly negotiated tensor took the place of the least "
                          "recently used one. If a training step uses more tensors than that, "
                          "every step is negotiated tensor by tensor; raise "
                          "TFRING_CACHE_CAPACITY above the step's count. (Said once.)";
}

}  // namespace tfring
