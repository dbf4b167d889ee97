// The negotiator: rank 0's record of which ranks have submitted which tensors.
//
// A pure state machine (no threads, no I/O), so it is tested directly. Rank 0's coordinator
// feeds it every rank's new Requests after each gather, in rank order, and takes the
// Responses for tensors that every rank has now submitted, in the order they became
// complete. Because only rank 0 decides that order and broadcasts it, every rank executes
// the same collectives in the same order whatever order ops were submitted in locally.
//
// A tensor in a process set (TensorKey::set) waits for that set's members only. A
// rank that has joined (tfring.join, SetJoined) counts as having submitted every tensor of
// its sets that it has not: the Response lists it in `joined`, and it contributes the
// reduction's identity.
//
// A completed tensor is checked before it is released: same collective, dtype, shape (all
// dimensions for allreduce and broadcast, all but the first for allgather), reduce op,
// scale factors and root rank on every rank. A mismatch becomes an error Response naming
// the tensor, what differs, and the ranks, which fails the op on every rank. Unnamed eager
// calls ("unnamed.<n>") pair by their order on each rank; their requests carry the caller's
// file and line, so a mismatch between them also says which call each rank made (the ranks'
// calls have drifted apart), and stall reports say where the waiting call was made.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tfring/kernels/core/message.h"

namespace tfring {

using SteadyClock = std::chrono::steady_clock;

class Negotiator {
 public:
  explicit Negotiator(int size);

  // Which ranks have joined, as of this cycle (indexed by rank). Tensors that now have
  // every member either submitted or joined complete.
  void SetJoined(const std::vector<bool>& joined);

  // Records that `rank` submitted `request` (keyed by its name, which the coordinator has
  // made unique per process set: TensorKey). A second request for a name the same rank
  // already has pending is an invariant failure (the coordinator rejects it first).
  void Add(int rank, const Request& request, SteadyClock::time_point now);

  // Responses for every tensor all ranks have now submitted, oldest completion first.
  std::vector<Response> TakeReady();

  struct Stalled {
    std::string name;
    std::vector<int> submitted;
    std::vector<int> missing;
    double waited_seconds;
    std::string call_site;  // an unnamed eager call: where the submitting rank made it
  };
  // Tensors some but not all ranks have submitted, pending for at least `min_age_seconds`.
  std::vector<Stalled> PendingOlderThan(double min_age_seconds, SteadyClock::time_point now) const;

  // Ranks whose calls have drifted apart, so that they wait on each other for ever: rank a
  // waits in an unnamed eager call S that rank b has not made, while b waits in another
  // tensor T that a has not made, each for at least `min_age_seconds`. A rank blocked in an
  // eager call cannot make another, so in a program that makes its eager collectives from
  // one thread neither call can ever complete. Returns error Responses for S and T (every
  // part of them, when they are grouped ops) naming both ranks' calls, and forgets them:
  // they fail on the ranks that made them, and every rank's later unnamed calls pair again
  // (UnnamedNames::CatchUp).
  std::vector<Response> TakeDrifted(double min_age_seconds, SteadyClock::time_point now);
  // Whether TakeDrifted would return anything (rank 0 then forces a negotiation round).
  bool HasDrifted(double min_age_seconds, SteadyClock::time_point now) const;

  size_t num_pending() const { return pending_.size(); }

 private:
  struct Drift {
    std::string waits_unnamed, waits_other;  // the pending tensors' keys (S and T)
    int unnamed_rank, other_rank;            // a and b
  };
  std::vector<Drift> FindDrifts(double min_age_seconds, SteadyClock::time_point now) const;

  struct Slot {
    std::vector<int32_t> members;  // global ranks
    std::vector<Request> by_rank;  // indexed by global rank
    std::vector<bool> present;
    int count = 0;
    bool complete = false;
    SteadyClock::time_point first_seen;
    std::vector<SteadyClock::time_point> since;  // indexed by global rank: when it submitted
  };

  void MaybeComplete(const std::string& name, Slot* slot);
  Response Validate(const Slot& slot) const;
  void WarnPairedCallSites(const std::string& name, int r0, const std::string& site0, int r,
                           const std::string& site) const;

  int size_;
  std::vector<bool> joined_;
  std::unordered_map<std::string, Slot> pending_;
  std::vector<std::string> completed_order_;
  mutable std::set<std::string> warned_site_pairs_;
};

// Why `r` cannot run with its joined ranks (r.joined), or "" when it can: an alltoall, a
// reducescatter (as Horovod), a broadcast whose root has joined, a GPU tensor. The same
// answer on every rank, from the response alone.
std::string JoinedProblem(const Response& r);

// Renders a stall report for the log or for an error, e.g.
// "'grad/w' (submitted by ranks [0]; missing on ranks [1]; waiting 61 s)".
std::string DescribeStalled(const std::vector<Negotiator::Stalled>& stalled);

// What the stall warning says happens next, given TFRING_STALL_SHUTDOWN_TIME_SECONDS.
std::string StallShutdownNote(double shutdown_seconds);

}  // namespace tfring
