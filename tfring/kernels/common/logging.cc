#include "tfring/kernels/common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace tfring {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void SetLogRank(int rank) { g_rank = rank; }
void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

LogMessage::LogMessage(const char* file, int line, LogLevel level, bool fatal) : fatal_(fatal) {
  stream_ << "[tfring rank " << g_rank.load() << "] " << LevelName(level);
  if (fatal || level <= LogLevel::kDebug) stream_ << " " << file << ":" << line;
  stream_ << ": ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  const std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (fatal_) {
    std::fputs("[tfring] this is a bug in tfring; please report it with the lines above\n", stderr);
    std::abort();
  }
}

}  // namespace tfring
