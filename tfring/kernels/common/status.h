// Status: the result of every runtime operation that can fail.
//
// Error policy (one screen):
//  - A closed set of codes. Each maps to one TensorFlow error class in the op glue
//    (tf/adapter.cc) and to one Python exception family.
//  - Recoverable problems (bad input, a mismatch across ranks, a lost peer, a backend
//    failure) are Status values that travel: the coordinator turns them into a failed op
//    with the same message on every rank.
//  - Broken invariants are library bugs: TFRING_CHECK aborts with file, line and rank.
//  - Messages say which tensor, which ranks and which values, in the caller's terms.
#pragma once

#include <string>
#include <utility>

namespace tfring {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something wrong (bad root, dtype, mismatch)
  kFailedPrecondition = 2,  // the runtime is not in a state to do this (not initialized)
  kAborted = 3,             // the runtime shut down, or stopped after a stall
  kDeadlineExceeded = 4,    // a wait ran past its limit
  kUnavailable = 5,         // a peer rank is gone or does not answer
  kInternal = 6,            // a backend (MPI, NCCL, CUDA) call failed
};

const char* StatusCodeName(StatusCode code);

// A failure's code as another rank sent it (a byte on the wire): that code where it names a
// failure, else kInternal (a failure all the same).
StatusCode FailureCodeFromWire(int code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// The one error for anything asked of tfring before tfring.init(): "tfring has not been
// initialized: call tfring.init() before <what>".
Status NotInitialized(const std::string& what);

// Errors that more than one layer catches (a TF kernel, an XLA lowering), in one wording:
// `collective` given a scalar where it splits or gathers rows;
std::string ScalarInputMessage(const std::string& collective, const std::string& name);
// a 16-bit integer tensor in GPU memory, which NCCL cannot reduce (`dtype_name` is
// DataTypeName's).
std::string GpuInt16Message(const std::string& dtype_name, const std::string& name);
// a broadcast's root rank outside the job of `size` ranks.
std::string RootRankMessage(int root_rank, int size, const std::string& name);

}  // namespace tfring

// Returns early from the enclosing function when `expr` is not OK.
#define TFRING_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::tfring::Status _tfring_s = (expr);    \
    if (!_tfring_s.ok()) return _tfring_s;  \
  } while (0)
