// FailureNotice: how a rank whose part of a device collective failed tells its peers at once.
//
// A NCCL collective that fails on one rank (a CUDA error, a bad buffer, an aborted
// communicator) leaves the other ranks waiting inside NCCL for a part that never comes.
// Without a word from the failing rank they could only wait out TFRING_PEER_TIMEOUT_SECONDS,
// and so would the failing rank's control plane, for them: two timeouts of the same length
// racing, and the job stopped instead of one op failed. So the failing rank announces its
// failure (before it aborts its communicators), and every executor polls for an
// announcement while it waits on the device (NcclExecutor::Complete).
//
// One failure per notice: a device executor that failed once fails every later call with
// that reason, so only the first announcement counts. Used only by the thread that runs
// cycles (as executors are).
#pragma once

#include <string>

#include "tfring/kernels/common/status.h"

namespace tfring {

class FailureNotice {
 public:
  virtual ~FailureNotice() = default;
  // Tells every other rank that this rank failed with `failure` (non-blocking; once).
  virtual void Announce(const Status& failure) = 0;
  // Whether another rank has announced a failure, or died (where the transport can tell);
  // if so, *failure is the reason to fail with (the announcing rank's status code, and words
  // naming that rank) and *from that rank. Cheap: polled while waiting on the device.
  virtual bool Heard(Status* failure, int* from) = 0;
};

}  // namespace tfring
