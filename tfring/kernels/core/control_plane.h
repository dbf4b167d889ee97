// ControlPlane: the small messages the coordinators of all ranks exchange each cycle.
//
// Contract: every rank's coordinator thread calls the same methods in the same order (the
// cycle in coordinator.cc guarantees it); calls come from that one thread only. A method
// returns a non-OK Status when a peer cannot be reached (kUnavailable) or the transport
// fails (kInternal); after that the control plane is not used again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"

namespace tfring {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Whether the job is busy (set before each cycle's exchanges): this rank has ops waiting,
  // or had some moments ago (a training loop, between its steps). A transport that may
  // sleep while it waits for peers stays awake then, since a late answer is on a step's
  // critical path. By default nothing.
  virtual void SetActive(bool /*active*/) {}
  // Bitwise AND of `words` across ranks, in place. Every rank passes the same length.
  virtual Status AllreduceAnd(std::vector<uint64_t>* words) = 0;
  // Rank 0 receives every rank's `mine` in `all` (indexed by rank); others receive nothing.
  virtual Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) = 0;
  // Rank 0's `bytes` replace every other rank's.
  virtual Status BroadcastFromRoot(std::string* bytes) = 0;
};

}  // namespace tfring
