#include "tfring/kernels/core/flight_recorder.h"

#include <cstdio>
#include <sstream>

#include "tfring/kernels/core/timeline.h"

namespace tfring {
namespace {

// Seconds since the Unix epoch of a steady-clock time point (null where never reached), so
// that the ranks' files line up: each rank converts with its own clocks at dump time.
std::string WallSeconds(FlightRecorder::Clock::time_point t,
                        FlightRecorder::Clock::time_point steady_now, double wall_now) {
  if (t == FlightRecorder::Clock::time_point{}) return "null";
  const double ago = std::chrono::duration<double>(steady_now - t).count();
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.6f", wall_now - ago);
  return buffer;
}

template <typename T>
std::string JsonList(const std::vector<T>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(values[i]);
  }
  return out + "]";
}

}  // namespace

FlightRecorder::FlightRecorder(int64_t capacity)
    : ring_(capacity > 0 ? static_cast<size_t>(capacity) : 0) {}

uint64_t FlightRecorder::Submitted(const Request& request, Clock::time_point created) {
  if (!on()) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t seq = next_seq_++;
  Record& r = ring_[seq % ring_.size()];
  r.seq = seq;
  r.name = request.name;  // assign: reuses the record's string buffers
  r.call_site = request.key.call_site;
  r.kind = request.kind;
  r.dtype = request.dtype;
  r.reduce_op = request.reduce_op;
  r.root_rank = request.root_rank;
  r.shape = request.shape;
  r.process_set = request.key.set;
  r.on_device = request.on_device;
  r.submitted = created;
  r.taken = r.agreed = r.started = r.finished = Clock::time_point{};
  r.done = false;
  r.error.clear();
  return seq;
}

FlightRecorder::Record* FlightRecorder::Find(uint64_t seq) {
  if (seq == 0 || ring_.empty()) return nullptr;
  Record& r = ring_[seq % ring_.size()];
  return r.seq == seq ? &r : nullptr;
}

void FlightRecorder::Mark(uint64_t seq, Clock::time_point Record::*field,
                          Clock::time_point when) {
  if (seq == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (Record* r = Find(seq)) r->*field = when;
}

void FlightRecorder::Finished(uint64_t seq, const Status& status) {
  if (seq == 0) return;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  Record* r = Find(seq);
  if (r == nullptr) return;
  r->finished = now;
  r->done = true;
  if (!status.ok()) r->error = status.message();
}

std::string FlightRecorder::JsonMembers() const {
  const auto steady_now = Clock::now();
  const double wall_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto when = [&](Clock::time_point t) { return WallSeconds(t, steady_now, wall_now); };
  std::ostringstream out;
  out << "\"capacity\": " << ring_.size()
      << ", \"cycles\": " << cycles_.load(std::memory_order_relaxed) << ", \"entries\": [";
  std::lock_guard<std::mutex> lock(mutex_);
  bool first = true;
  const uint64_t oldest = next_seq_ > ring_.size() ? next_seq_ - ring_.size() : 1;
  for (uint64_t seq = oldest; seq < next_seq_ && !ring_.empty(); ++seq) {
    const Record& r = ring_[seq % ring_.size()];
    if (r.seq != seq) continue;
    out << (first ? "\n" : ",\n") << "  {\"seq\": " << r.seq << ", \"name\": " << JsonString(r.name)
        << ", \"op\": \"" << CollectiveKindName(r.kind) << "\", \"dtype\": \""
        << DataTypeName(r.dtype) << "\", \"shape\": " << JsonList(r.shape)
        << ", \"process_set\": " << JsonList(r.process_set);
    if (r.kind == CollectiveKind::kAllreduce || r.kind == CollectiveKind::kReducescatter) {
      out << ", \"reduce_op\": \"" << ReduceOpName(r.reduce_op) << "\"";
    }
    if (r.kind == CollectiveKind::kBroadcast) out << ", \"root_rank\": " << r.root_rank;
    if (!r.call_site.empty()) out << ", \"call_site\": " << JsonString(r.call_site);
    out << ", \"device\": \"" << (r.on_device ? "gpu" : "host") << "\""
        << ", \"submitted\": " << when(r.submitted) << ", \"taken\": " << when(r.taken)
        << ", \"agreed\": " << when(r.agreed) << ", \"started\": " << when(r.started)
        << ", \"finished\": " << when(r.finished) << ", \"status\": "
        << (!r.done ? "\"pending\"" : r.error.empty() ? "\"ok\"" : JsonString(r.error)) << "}";
    first = false;
  }
  out << "\n]";
  return out.str();
}

}  // namespace tfring
