#include "tfring/kernels/core/timeline.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/tensor_key.h"

namespace tfring {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Timeline::~Timeline() { Stop(); }

int64_t Timeline::NowMicros() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() -
         start_us_;
}

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) {
    return Status::FailedPrecondition("a timeline is already being written; stop it first");
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return Status::InvalidArgument("cannot write the timeline to '" + path +
                                   "': " + std::strerror(errno));
  }
  file_ = f;
  mark_cycles_ = mark_cycles;
  start_us_ = 0;
  start_us_ = NowMicros();
  rows_.clear();
  open_.clear();
  std::fputs("[\n", file_);
  Write(R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "tfring rank 0"}})");
  std::fflush(file_);
  active_.store(true, std::memory_order_relaxed);
  return Status::OK();
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  active_.store(false, std::memory_order_relaxed);
  const int64_t ts = NowMicros();
  for (auto& kv : open_) {
    if (kv.second) EndLocked(kv.first, ts);
  }
  // The last event ended with ",\n": an empty object keeps the array valid JSON.
  std::fputs("{}\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::Write(const std::string& event) {
  std::fputs(event.c_str(), file_);
  std::fputs(",\n", file_);
}

int Timeline::RowOf(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  Write(R"({"name": "thread_name", "ph": "M", "pid": 0, "tid": )" + std::to_string(row) +
        R"(, "args": {"name": )" + JsonString(tensor) + "}}");
  return row;
}

void Timeline::EndLocked(const std::string& tensor, int64_t ts) {
  Write(R"({"ph": "E", "pid": 0, "tid": )" + std::to_string(RowOf(tensor)) +
        ", \"ts\": " + std::to_string(ts) + "}");
  open_[tensor] = false;
}

std::string Timeline::RowName(const Request& q) {
  return CachedByCallSite(q) ? UnnamedCacheKey(q.key.call_site, q.key.set) : q.name;
}

void Timeline::Submitted(const Request& q, std::chrono::steady_clock::time_point since) {
  if (!active()) return;
  const std::string tensor = RowName(q);
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  const int64_t now = NowMicros();
  const int64_t at = std::chrono::duration_cast<std::chrono::microseconds>(
                         since.time_since_epoch()).count() - start_us_;
  // An entry made before the timeline started begins with it.
  const int64_t ts = std::max<int64_t>(0, std::min(at, now));
  Write(R"({"name": "SUBMIT", "ph": "X", "pid": 0, "tid": )" + std::to_string(RowOf(tensor)) +
        ", \"ts\": " + std::to_string(ts) + ", \"dur\": " + std::to_string(now - ts) + "}");
}

void Timeline::Phase(const Request& q, const std::string& phase, const std::string& args) {
  if (!active()) return;
  const std::string tensor = RowName(q);
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  const int64_t ts = NowMicros();
  auto it = open_.find(tensor);
  if (it != open_.end() && it->second) EndLocked(tensor, ts);
  Write(R"({"name": )" + JsonString(phase) + R"(, "ph": "B", "pid": 0, "tid": )" +
        std::to_string(RowOf(tensor)) + ", \"ts\": " + std::to_string(ts) +
        (args.empty() ? "" : ", \"args\": {" + args + "}") + "}");
  open_[tensor] = true;
}

void Timeline::GroupPhase(const std::vector<Entry*>& group, const std::string& phase,
                          const std::string& args) {
  if (!active()) return;
  for (const Entry* e : group) Phase(e->request, phase, args);
}

void Timeline::End(const Request& q) {
  if (!active()) return;
  const std::string tensor = RowName(q);
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  auto it = open_.find(tensor);
  if (it != open_.end() && it->second) EndLocked(tensor, NowMicros());
}

void Timeline::MarkCycle() {
  if (!active() || !mark_cycles_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  Write(R"({"name": "CYCLE", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": )" +
        std::to_string(NowMicros()) + "}");
}

void Timeline::LastIn(int64_t agreed_us, int rank, double seconds,
                      const std::string& collective) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || agreed_us < start_us_) return;  // a cycle from before the start
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.3f", seconds * 1e3);
  Write(R"({"name": "rank )" + std::to_string(rank) +
        R"( last in", "ph": "i", "s": "t", "pid": 0, "tid": )" +
        std::to_string(RowOf("LAST INTO CYCLE")) + ", \"ts\": " +
        std::to_string(agreed_us - start_us_) + R"(, "args": {"rank": )" +
        std::to_string(rank) + R"(, "others_waited_ms": )" + ms +
        R"(, "collective": )" + JsonString(collective) + "}}");
}

void Timeline::Flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) std::fflush(file_);
}

std::string Timeline::GroupArgs(const std::vector<Entry*>& group, int64_t bytes) {
  size_t tensors = 0;  // a grouped op's unit counts its tensors (Signature::parts)
  for (const Entry* e : group) tensors += std::max<size_t>(1, e->request.parts.size());
  return "\"group\": " + JsonString(group[0]->request.name) +
         ", \"tensors\": " + std::to_string(tensors) + ", \"bytes\": " + std::to_string(bytes);
}

}  // namespace tfring
