// The coordinator's side of a negotiation round (the round itself, rank 0's decisions and
// the stall checks, is negotiation_round.h): this rank's new requests sent, and rank 0's
// responses recorded in every rank's response cache in the same order (cache_sync.h), with
// what that changes for this rank's pending entries. The cycle around it is in
// coordinator.cc.
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
    // This rank's entry waiting on an evicted slot was not ready everywhere (a slot
    // executed in this cycle is never taken): negotiated from the next cycle on, as the
    // other ranks' will be.
    const int evicted = cache_sync_.Record(r);
    if (evicted >= 0 && pending_.AtSlot(evicted)) NegotiateInstead(evicted);
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

}  // namespace tfring
