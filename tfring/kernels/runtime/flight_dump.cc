#include "tfring/kernels/runtime/flight_dump.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {
namespace {

int g_pipe[2] = {-1, -1};

// SIGUSR1: wakes FlightDump's thread. Only async-signal-safe calls.
void OnDumpSignal(int) {
  const int saved = errno;
  const char byte = 1;
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

Status MakeFolders(const std::string& folder) {
  for (size_t at = 1; at <= folder.size(); ++at) {
    if (at < folder.size() && folder[at] != '/') continue;
    const std::string part = folder.substr(0, at);
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      return Status::FailedPrecondition("cannot make the flight recorder's folder " + part +
                                        ": " + std::strerror(errno));
    }
  }
  return Status::OK();
}

// What faulthandler wrote into `fd` since the last dump; the file is emptied after.
std::string TakeStacks(int fd) {
  if (fd < 0) return "";
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return "";
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = pread(fd, &text[0], text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (ftruncate(fd, 0) == 0) lseek(fd, 0, SEEK_SET);
  return text;
}

std::string Sanitized(const std::string& name) {
  std::string out;
  for (char c : name) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  }
  return out;
}

}  // namespace

std::string DefaultFlightRecorderFolder() {
  const char* tmp = std::getenv("TMPDIR");
  std::string job = "job";
  if (const char* ns = std::getenv("PMIX_NAMESPACE")) {
    job = ns;
  } else if (const char* slurm = std::getenv("SLURM_JOB_ID")) {
    const char* step = std::getenv("SLURM_STEP_ID");
    job = std::string("slurm-") + slurm + (step ? std::string(".") + step : "");
  }
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/tfring-flight-recorder/" + Sanitized(job);
}

FlightDump& FlightDump::Get() {
  static FlightDump* dump = new FlightDump();  // never destroyed: its thread lives on
  return *dump;
}

void FlightDump::Configure(const std::string& folder, int rank, int size,
                           std::shared_ptr<const FlightRecorder> recorder) {
  std::lock_guard<std::mutex> lock(mutex_);
  folder_ = folder;
  rank_ = rank;
  size_ = size;
  recorder_ = std::move(recorder);
  if (installed_ || !recorder_ || !recorder_->on()) return;
  if (pipe(g_pipe) != 0) {
    TFRING_LOG(kWarning) << "flight recorder: no pipe for SIGUSR1 (" << std::strerror(errno)
                         << "); dumps are written only on failures and when asked";
    return;
  }
  fcntl(g_pipe[1], F_SETFL, fcntl(g_pipe[1], F_GETFL) | O_NONBLOCK);
  struct sigaction action = {};
  action.sa_handler = OnDumpSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  thread_ = std::thread([this] { Serve(); });
  thread_.detach();
  installed_ = true;
}

bool FlightDump::SetStacksFd(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  stacks_fd_ = installed_ ? fd : -1;
  return installed_;
}

std::string FlightDump::Note() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recorder_ || !recorder_->on()) return "";
  return " (flight recorder dumped to " + folder_ + ": python -m tfring.flight_recorder " +
         folder_ + ")";
}

Status FlightDump::Dump(const std::string& reason, std::string* path) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!recorder_ || !recorder_->on()) {
    return Status::FailedPrecondition(
        "the flight recorder is off (TFRING_FLIGHT_RECORDER_ENTRIES=0)");
  }
  if (!installed_ || stacks_fd_ < 0) {  // no Python stacks to wait for: write it here
    lock.unlock();
    return Write(reason, path);
  }
  requested_reason_ = reason;
  const uint64_t target = dumps_written_ + 1;
  kill(getpid(), SIGUSR1);
  if (!written_.wait_for(lock, std::chrono::seconds(10),
                         [&] { return dumps_written_ >= target; })) {
    return Status::DeadlineExceeded("the flight recorder's dump took longer than 10 s");
  }
  *path = last_path_;
  return last_status_;
}

void FlightDump::Serve() {
  char byte;
  while (true) {
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reason.swap(requested_reason_);
    }
    if (reason.empty()) reason = "SIGUSR1 (a dump asked for from outside: kill -USR1)";
    std::string path;
    const Status s = Write(reason, &path);
    if (!s.ok()) {
      TFRING_LOG(kWarning) << "flight recorder: " << s.message();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    last_path_ = path;
    last_status_ = s;
    ++dumps_written_;
    written_.notify_all();
  }
}

Status FlightDump::Write(const std::string& reason, std::string* path) {
  std::string folder, record;
  int rank, size, fd;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!recorder_) return Status::FailedPrecondition("tfring was never initialized");
    folder = folder_;
    rank = rank_;
    size = size_;
    fd = stacks_fd_;
    record = recorder_->JsonMembers();
  }
  TFRING_RETURN_IF_ERROR(MakeFolders(folder));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  char when[32];
  std::snprintf(when, sizeof(when), "%.6f", now);
  const std::string text = "{\"rank\": " + std::to_string(rank) + ", \"size\": " +
                           std::to_string(size) + ", \"host\": " + JsonString(host) +
                           ", \"pid\": " + std::to_string(getpid()) + ", \"reason\": " +
                           JsonString(reason) + ", \"dumped_at\": " + when + ", " + record +
                           ", \"python_stacks\": " + JsonString(TakeStacks(fd)) + "}\n";
  *path = folder + "/rank-" + std::to_string(rank) + ".json";
  const std::string partial = *path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) {
    return Status::FailedPrecondition("cannot write " + partial + ": " + std::strerror(errno));
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(partial.c_str(), path->c_str()) != 0) {
    return Status::FailedPrecondition("cannot write " + *path + ": " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace tfring
