// JoinedStandIns: what a rank that has joined (tfring.join()) runs in place of the tensors
// it does not have, so that the others' collectives complete: for a reduction, the
// identity of the reduction; for a broadcast, a buffer to receive into; for an allgather,
// no rows. Their outputs are thrown away.
//
// Made by the thread running a cycle, for the responses of one process set in that cycle
// (ExecutionStep::RunInSet), and freed when their execution is over: it owns the entries
// and their buffers, which must outlive the executors' calls.
#pragma once

#include <deque>
#include <vector>

#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/message.h"

namespace tfring {

class JoinedStandIns {
 public:
  // The entry this rank runs for `r`, as the member at `position` of a set of `set_size`.
  Entry* For(const Response& r, int position, int set_size);

 private:
  char* Buffer(size_t bytes);

  std::deque<std::vector<char>> buffers_;
  std::deque<Entry> entries_;  // deques: what they hold stays where it is as they grow
};

}  // namespace tfring
