#include "tfring/kernels/core/straggler_watch.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/byte_codec.h"

namespace tfring {
namespace {

// The first byte of a window on the wire: what it is, and its layout's version.
constexpr uint8_t kWindowTag = 0x57;

int64_t Micros(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

double SecondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

StragglerWatch::StragglerWatch(const Options& options, int rank, int size)
    : rank_(rank),
      window_seconds_(options.straggler_window_seconds),
      report_seconds_(options.straggler_report_seconds),
      max_cycles_(std::clamp<size_t>(kRecordsPerWindow / std::max(size, 1), 64,
                                     kMaxCyclesPerWindow)),
      start_(Clock::now()),
      last_exchange_(start_),
      last_log_(start_),
      tally_(rank == 0 && options.straggler_window_seconds > 0
                 ? std::make_unique<StragglerTally>(size)
                 : nullptr) {}

void StragglerWatch::Agreed(Clock::time_point submitted, Clock::time_point agreed,
                            const Request& tensor) {
  if (!on()) return;
  const int64_t wait_us =
      std::chrono::duration_cast<std::chrono::microseconds>(agreed - submitted).count();
  if (cycle_has_wait_ && wait_us <= current_.wait_us) return;
  cycle_has_wait_ = true;
  current_.wait_us = wait_us;
  current_.agreed_us = Micros(agreed);
  current_.collective = Timeline::RowName(tensor);
}

void StragglerWatch::EndCycle() {
  ++cycle_;
  if (!cycle_has_wait_) return;
  cycle_has_wait_ = false;
  if (window_.cycles.size() >= max_cycles_) {
    ++window_.uncounted_cycles;
    return;
  }
  current_.cycle = cycle_;
  window_.cycles.push_back(std::move(current_));
  current_ = CycleWait();
}

bool StragglerWatch::ExchangeDue(Clock::time_point now) const {
  return tally_ != nullptr && SecondsBetween(last_exchange_, now) >= window_seconds_ &&
         (!window_.cycles.empty() || window_.uncounted_cycles > 0);
}

Status StragglerWatch::Exchange(ControlPlane* control_plane, Timeline* timeline) {
  const auto now = Clock::now();
  std::vector<std::string> all;
  TFRING_RETURN_IF_ERROR(control_plane->GatherToRoot(Encode(window_), &all));
  window_ = WaitWindow();
  std::string report;
  if (tally_) {
    std::vector<WaitWindow> windows(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      // A window that does not decode is left out (logged): rank 0 must still answer
      // every rank's wait in the broadcast below, or they would hang in it.
      const Status s = Decode(all[r], static_cast<int>(r), &windows[r]);
      if (!s.ok()) {
        TFRING_LOG(kError) << s.message();
        windows[r] = WaitWindow();
      }
    }
    const std::vector<StragglerTally::LastIn> last_ins = tally_->Add(
        windows, SecondsBetween(last_exchange_, now), SecondsBetween(start_, now));
    for (const StragglerTally::LastIn& l : last_ins) {
      if (l.agreed_us >= 0) timeline->LastIn(l.agreed_us, l.rank, l.seconds, l.collective);
    }
    report = tally_->Json();
    if (report_seconds_ > 0 && SecondsBetween(last_log_, now) >= report_seconds_) {
      TFRING_LOG(kWarning) << tally_->Line();
      last_log_ = now;
    }
  }
  TFRING_RETURN_IF_ERROR(control_plane->BroadcastFromRoot(&report));
  last_exchange_ = now;
  std::lock_guard<std::mutex> lock(report_mutex_);
  report_ = std::move(report);
  return Status::OK();
}

std::string StragglerWatch::Report() const {
  std::lock_guard<std::mutex> lock(report_mutex_);
  return report_;
}

std::string StragglerWatch::Encode(const WaitWindow& window) {
  // Each collective's name once (a table), then the cycles by index: a window repeats a
  // training step's few names hundreds of times.
  std::unordered_map<std::string, uint32_t> index;
  std::vector<const std::string*> names;
  for (const CycleWait& c : window.cycles) {
    if (index.emplace(c.collective, static_cast<uint32_t>(names.size())).second) {
      names.push_back(&c.collective);
    }
  }
  Writer w;
  w.Put<uint8_t>(kWindowTag);
  w.Put<uint32_t>(static_cast<uint32_t>(names.size()));
  for (const std::string* name : names) w.PutString(*name);
  w.Put<uint32_t>(static_cast<uint32_t>(window.cycles.size()));
  for (const CycleWait& c : window.cycles) {
    w.Put<int64_t>(c.cycle);
    w.Put<int64_t>(c.wait_us);
    w.Put<int64_t>(c.agreed_us);
    w.Put<uint32_t>(index.at(c.collective));
  }
  w.Put<int64_t>(window.uncounted_cycles);
  return w.Take();
}

Status StragglerWatch::Decode(const std::string& bytes, int from_rank, WaitWindow* window) {
  Reader rd(bytes);
  const auto damaged = [from_rank](const char* what) {
    return Status::Internal("the straggler watch's window from rank " +
                            std::to_string(from_rank) + " is damaged (" + what +
                            "); it is left out of the report");
  };
  uint8_t tag;
  uint32_t num_names, n;
  if (!rd.Get(&tag) || tag != kWindowTag) return damaged("its tag");
  if (!rd.Get(&num_names) || num_names > kMaxCyclesPerWindow) return damaged("its names");
  std::vector<std::string> names(num_names);
  for (std::string& name : names) {
    if (!rd.GetString(&name)) return damaged("a name");
  }
  if (!rd.Get(&n) || n > kMaxCyclesPerWindow) return damaged("its count");
  window->cycles.resize(n);
  for (CycleWait& c : window->cycles) {
    uint32_t name;
    if (!rd.Get(&c.cycle) || !rd.Get(&c.wait_us) || !rd.Get(&c.agreed_us) || !rd.Get(&name) ||
        name >= names.size()) {
      return damaged("a cycle");
    }
    c.collective = names[name];
  }
  if (!rd.Get(&window->uncounted_cycles) || !rd.done()) return damaged("its end");
  return Status::OK();
}

}  // namespace tfring
