// NegotiationRound: one round of the cycle's step 3 and what decides it on rank 0: the
// Negotiator (who submitted what), the stall and drift checks, and the autotuner's next
// setting. Every rank's new requests go to rank 0 and rank 0's ResponseList comes back to
// every rank; what a rank then does with it (its cache, its entries) is the Coordinator's.
//
// Used only by the thread that runs a cycle; every rank calls Run in the same cycles.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/core/autotuner.h"
#include "tfring/kernels/core/control_plane.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/negotiator.h"

namespace tfring {

class NegotiationRound {
 public:
  NegotiationRound(const Options& options, int rank, int size);

  // Setting up the autotuner's log (TFRING_AUTOTUNE_LOG): OK, or why it failed.
  const Status& init_status() const { return init_status_; }
  // Starts the stall warnings' clock (Coordinator::Start).
  void Start(SteadyClock::time_point now) { last_stall_warning_ = now; }

  // Whether this cycle must hold a round even if no rank has new requests: rank 0 has a
  // drift or stall error to send, or a new setting. Warns of stalled tensors (rank 0).
  bool Due(SteadyClock::time_point now);
  // Rank 0: which ranks have joined as of this cycle (tensors no longer wait for them).
  void SetJoined(const std::vector<bool>& joined);
  // The round: `mine` gathered to rank 0, which decides; `*list` is then rank 0's decision
  // on every rank. An error is the control plane's (a lost peer) or a malformed response
  // list; a malformed request list reaches every rank as the list's abort_message, in the
  // decoder's words (which name its sender).
  Status Run(ControlPlane* control_plane, const std::vector<Request>& mine,
             ResponseList* list);

  // The autotuner's bookkeeping (rank 0 with TFRING_AUTOTUNE; otherwise nothing): the
  // bytes a cycle executed, and that a setting took effect.
  void Record(int64_t bytes);
  void Applied();

 private:
  const Options options_;
  const int rank_;
  const int size_;
  Negotiator negotiator_;                 // rank 0's
  std::unique_ptr<Autotuner> autotuner_;  // rank 0, with TFRING_AUTOTUNE=1
  bool params_pending_ = false;           // rank 0: a setting to send in the next round
  TunedParams pending_params_;
  SteadyClock::time_point last_stall_warning_{};
  Status init_status_;
};

}  // namespace tfring
