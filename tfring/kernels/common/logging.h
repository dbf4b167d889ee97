// Logging with a rank prefix, and checked invariants.
//
//   TFRING_LOG(kWarning) << "tensor " << name << " stalled";
//   TFRING_CHECK(count >= 0) << "negative count for " << name;
//
// A failed TFRING_CHECK is a library bug: it prints file, line and rank, then aborts.
#pragma once

#include <sstream>

#include "tfring/kernels/common/options.h"

namespace tfring {

void SetLogRank(int rank);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level, bool fatal = false);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
  bool fatal_;
};

}  // namespace tfring

#define TFRING_LOG(level)                                        \
  if (!::tfring::LogEnabled(::tfring::LogLevel::level)) {        \
  } else                                                         \
    ::tfring::LogMessage(__FILE__, __LINE__, ::tfring::LogLevel::level).stream()

#define TFRING_CHECK(cond)                                                          \
  if (cond) {                                                                       \
  } else                                                                            \
    ::tfring::LogMessage(__FILE__, __LINE__, ::tfring::LogLevel::kError, true).stream() \
        << "Check failed: " #cond " "
