#include "tfring/kernels/core/negotiation_round.h"

#include <chrono>
#include <string>

#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

double SecondsNow() {
  return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
}

}  // namespace

NegotiationRound::NegotiationRound(const Options& options, int rank, int size)
    : options_(options), rank_(rank), size_(size), negotiator_(size) {
  if (options.autotune && rank_ == 0) {
    autotuner_ = std::make_unique<Autotuner>(options);
    if (!options.autotune_log.empty()) init_status_ = autotuner_->OpenLog(options.autotune_log);
  }
}

bool NegotiationRound::Due(SteadyClock::time_point now) {
  bool due = false;
  if (rank_ == 0) {
    // The drift error and the stall abort travel in a round's broadcast.
    if (options_.drift_check_seconds > 0 &&
        negotiator_.HasDrifted(options_.drift_check_seconds, now)) {
      due = true;
    }
    if (options_.stall_shutdown_time_seconds > 0 &&
        !negotiator_.PendingOlderThan(options_.stall_shutdown_time_seconds, now).empty()) {
      due = true;
    }
    if (options_.stall_check_time_seconds > 0 &&
        std::chrono::duration<double>(now - last_stall_warning_).count() >=
            options_.stall_check_time_seconds) {
      auto stalled = negotiator_.PendingOlderThan(options_.stall_check_time_seconds, now);
      if (!stalled.empty()) {
        last_stall_warning_ = now;
        TFRING_LOG(kWarning)
            << "Stalled collectives: some ranks submitted tensors that others have not for "
               "more than "
            << options_.stall_check_time_seconds << " s: " << DescribeStalled(stalled)
            << ". Ranks may be running different code paths or one may be hung. "
            << StallShutdownNote(options_.stall_shutdown_time_seconds);
      }
    }
  }
  if (autotuner_ && !params_pending_) params_pending_ = autotuner_->TakeChange(&pending_params_);
  return due || params_pending_;  // a setting travels in a round too
}

void NegotiationRound::SetJoined(const std::vector<bool>& joined) {
  if (rank_ == 0) negotiator_.SetJoined(joined);
}

Status NegotiationRound::Run(ControlPlane* control_plane, const std::vector<Request>& mine,
                             ResponseList* list) {
  std::vector<std::string> gathered;
  TFRING_RETURN_IF_ERROR(control_plane->GatherToRoot(EncodeRequests(mine), &gathered));
  std::string bytes;
  if (rank_ == 0) {
    const auto now = SteadyClock::now();
    Status malformed;
    for (int r = 0; r < size_ && malformed.ok(); ++r) {
      std::vector<Request> reqs;
      malformed = DecodeRequests(gathered[r], r, size_, &reqs);
      if (malformed.ok()) {
        for (const Request& req : reqs) negotiator_.Add(r, req, now);
      }
    }
    ResponseList decided;
    if (!malformed.ok()) {
      // Not returned here: the peers already wait for this round's broadcast, and would wait
      // there until TFRING_PEER_TIMEOUT_SECONDS, to fail with words naming neither the
      // message nor its sender. The abort stops every rank, this one too, in this cycle,
      // with the decoder's words (which name the sender).
      decided.abort_message = malformed.message();
    } else {
      decided.responses = negotiator_.TakeReady();
      if (options_.drift_check_seconds > 0) {
        for (Response& r : negotiator_.TakeDrifted(options_.drift_check_seconds, now)) {
          decided.responses.push_back(std::move(r));
        }
      }
      if (params_pending_) {
        decided.has_params = true;
        decided.fusion_threshold_bytes = pending_params_.fusion_threshold_bytes;
        decided.cycle_time_ms = pending_params_.cycle_time_ms;
        params_pending_ = false;
      }
      if (options_.stall_shutdown_time_seconds > 0) {
        auto stalled = negotiator_.PendingOlderThan(options_.stall_shutdown_time_seconds, now);
        if (!stalled.empty()) {
          decided.abort_message =
              "tfring stopped because tensors stalled for more than "
              "TFRING_STALL_SHUTDOWN_TIME_SECONDS=" +
              std::to_string(static_cast<int>(options_.stall_shutdown_time_seconds)) +
              " s: " + DescribeStalled(stalled) +
              ". Every rank must submit the same collectives; a rank that is missing them runs "
              "a different code path, is behind, or has hung.";
        }
      }
    }
    bytes = EncodeResponseList(decided);
  }
  TFRING_RETURN_IF_ERROR(control_plane->BroadcastFromRoot(&bytes));
  return DecodeResponseList(bytes, size_, list);
}

void NegotiationRound::Record(int64_t bytes) {
  if (autotuner_) autotuner_->Record(bytes, SecondsNow());
}

void NegotiationRound::Applied() {
  if (autotuner_) autotuner_->Applied(SecondsNow());
}

}  // namespace tfring
