#include "tfring/kernels/common/status.h"

namespace tfring {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

StatusCode FailureCodeFromWire(int code) {
  const bool failure = code > static_cast<int>(StatusCode::kOk) &&
                       code <= static_cast<int>(StatusCode::kInternal);
  return failure ? static_cast<StatusCode>(code) : StatusCode::kInternal;
}

Status NotInitialized(const std::string& what) {
  return Status::FailedPrecondition("tfring has not been initialized: call tfring.init() before " +
                                    what);
}

std::string ScalarInputMessage(const std::string& collective, const std::string& name) {
  return collective + " needs a tensor of rank >= 1; '" + name +
         "' is a scalar. Reshape it to [1] first.";
}

std::string RootRankMessage(int root_rank, int size, const std::string& name) {
  return "root_rank must be in [0, size) = [0, " + std::to_string(size) +
         "). Received: root_rank=" + std::to_string(root_rank) + " (tensor '" + name + "')";
}

std::string GpuInt16Message(const std::string& dtype_name, const std::string& name) {
  return "tfring does not support dtype " + dtype_name + " in GPU memory (NCCL has no 16-bit "
         "integers; place tensor '" + name + "' on the CPU, or cast it)";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace tfring
