// The coordinator's negotiation round: every rank's new requests gathered to rank 0, its
// decisions (ready tensors, drifts, a stall shutdown, the autotuner's setting) broadcast
// back and recorded in every rank's response cache in the same order; and the stall checks
// that say which ranks are missing a tensor. The cycle around it is in coordinator.cc.
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

  std::vector<std::string> gathered;
  TFRING_RETURN_IF_ERROR(control_plane_->GatherToRoot(EncodeRequests(mine), &gathered));
  std::string bytes;
  if (rank_ == 0) {
    const auto now = SteadyClock::now();
    for (int r = 0; r < size_; ++r) {
      std::vector<Request> reqs;
      TFRING_RETURN_IF_ERROR(DecodeRequests(gathered[r], r, size_, &reqs));
      for (const Request& req : reqs) negotiator_.Add(r, req, now);
    }
    ResponseList list;
    list.responses = negotiator_.TakeReady();
    if (options_.drift_check_seconds > 0) {
      for (Response& r : negotiator_.TakeDrifted(options_.drift_check_seconds, now)) {
        list.responses.push_back(std::move(r));
      }
    }
    if (params_pending_) {
      list.has_params = true;
      list.fusion_threshold_bytes = pending_params_.fusion_threshold_bytes;
      list.cycle_time_ms = pending_params_.cycle_time_ms;
      params_pending_ = false;
    }
    if (options_.stall_shutdown_time_seconds > 0) {
      auto stalled = negotiator_.PendingOlderThan(options_.stall_shutdown_time_seconds, now);
      if (!stalled.empty()) {
        list.abort_message =
            "tfring stopped because tensors stalled for more than "
            "TFRING_STALL_SHUTDOWN_TIME_SECONDS=" +
            std::to_string(static_cast<int>(options_.stall_shutdown_time_seconds)) +
            " s: " + DescribeStalled(stalled) +
            ". Every rank must submit the same collectives; a rank that is missing them runs "
            "a different code path, is behind, or has hung.";
      }
    }
    bytes = EncodeResponseList(list);
  }
  TFRING_RETURN_IF_ERROR(control_plane_->BroadcastFromRoot(&bytes));
  ResponseList list;
  TFRING_RETURN_IF_ERROR(DecodeResponseList(bytes, size_, &list));
  ApplyParams(list);
  for (Response& r : list.responses) {
    // Every rank records it, members of its set or not, so that caches stay identical.
    if (r.ok() && r.cacheable) {
      int evicted;
      if (r.call_site.empty()) {
        evicted = cache_.Put(r, SignatureOf(r));
      } else {
        Response under_site = r;  // unnamed calls: under their call site (TakeNewEntries)
        under_site.name = UnnamedCacheKey(r.call_site, r.process_set);
        evicted = cache_.Put(under_site, SignatureOf(under_site));
      }
      if (evicted >= 0) Evicted(evicted);
    }
    // Numbers of later unnamed calls agree again: after a call that failed (before it
    // returns to its caller), and after one this rank sat out while joined.
    if (!r.ok() || std::find(r.joined.begin(), r.joined.end(), rank_) != r.joined.end()) {
      unnamed_names_.CatchUp(r.process_set, r.name);
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

void Coordinator::CheckStalls(SteadyClock::time_point now, bool* force_round) {
  // The drift error travels in a negotiation round's broadcast, like the abort below.
  if (options_.drift_check_seconds > 0 &&
      negotiator_.HasDrifted(options_.drift_check_seconds, now)) {
    *force_round = true;
  }
  if (options_.stall_shutdown_time_seconds > 0 &&
      !negotiator_.PendingOlderThan(options_.stall_shutdown_time_seconds, now).empty()) {
    *force_round = true;  // the abort travels in a negotiation round's broadcast
  }
  if (options_.stall_check_time_seconds <= 0) return;
  if (std::chrono::duration<double>(now - last_stall_warning_).count() <
      options_.stall_check_time_seconds) {
    return;
  }
  auto stalled = negotiator_.PendingOlderThan(options_.stall_check_time_seconds, now);
  if (stalled.empty()) return;
  last_stall_warning_ = now;
  TFRING_LOG(kWarning) << "Stalled collectives: some ranks submitted tensors that others have "
                          "not for more than "
                       << options_.stall_check_time_seconds << " s: " << DescribeStalled(stalled)
                       << ". Ranks may be running different code paths or one may be hung. "
                       << StallShutdownNote(options_.stall_shutdown_time_seconds);
}

}  // namespace tfring
