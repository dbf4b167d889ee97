#include "tfring/kernels/core/straggler_tally.h"

#include <algorithm>
#include <cstdio>

#include "tfring/kernels/core/timeline.h"

namespace tfring {
namespace {

// A rank is named when the others waited for it at least this share of the time the report
// covers, at least kMinHeldSeconds in all, and at least a quarter as long as for the rank
// they waited for most. Scheduling noise on a loaded machine held even ranks' peers up to
// about 5% of the time in the tests (tests/failure/test_straggler_report.py), spread over
// the ranks; a straggler worth a look costs more. No rule relative to the other ranks:
// several ranks may be slow, each its own way, and each is named.
constexpr double kMinShare = 0.10;
constexpr double kMinHeldSeconds = 0.05;
constexpr double kOfTheMost = 0.25;
// How: one event that is at least half its lateness is "once"; late (by kLastInSeconds or
// more) in at least this share of the cycles of the collective it held the others up in
// most (at least kEveryStepCycles of them: a training step's) is "every_step"; anything
// else "at_times".
constexpr double kEveryStepShare = 0.5;
constexpr int64_t kEveryStepCycles = 5;
// A bounded map of collectives per rank; past it, lateness is summed under one name.
constexpr size_t kMaxCollectives = 64;
const char* const kOtherCollectives = "(other collectives)";
// The collectives shown per rank in the report.
constexpr size_t kShownCollectives = 5;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Seconds(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v < 10 ? "%.3f s" : "%.1f s", v);
  return buf;
}

}  // namespace

// The `n` collectives the others waited longest in, longest first.
std::vector<std::pair<std::string, StragglerTally::CollectiveTally>> StragglerTally::Largest(
    const std::map<std::string, CollectiveTally>& m, size_t n) {
  std::vector<std::pair<std::string, CollectiveTally>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

StragglerTally::StragglerTally(int size) : size_(size), ranks_(size) {}

std::vector<StragglerTally::LastIn> StragglerTally::Add(const std::vector<WaitWindow>& windows,
                                                        double window_seconds,
                                                        double at_seconds) {
  ++windows_;
  seconds_ += window_seconds;
  // cycle -> (rank, its record), in cycle order.
  std::map<int64_t, std::vector<std::pair<int, const CycleWait*>>> by_cycle;
  for (int r = 0; r < size_ && r < static_cast<int>(windows.size()); ++r) {
    for (const CycleWait& c : windows[r].cycles) by_cycle[c.cycle].push_back({r, &c});
    cycles_uncounted_ = std::max(cycles_uncounted_, windows[r].uncounted_cycles);
  }
  std::vector<LastIn> last_ins;
  for (const auto& [cycle, records] : by_cycle) {
    if (records.size() < 2) continue;  // nobody to compare with (a set of one, or joined)
    ++cycles_compared_;
    const CycleWait* first_in = records[0].second;
    const CycleWait* last = records[0].second;
    int last_rank = records[0].first;
    int64_t rank0_agreed = -1;
    for (const auto& [r, c] : records) {
      if (c->wait_us > first_in->wait_us) first_in = c;
      if (c->wait_us < last->wait_us) {
        last = c;
        last_rank = r;
      }
      if (r == 0) rank0_agreed = c->agreed_us;
    }
    // What the first rank in waited in: the collective the others were held up in.
    const std::string& collective = first_in->collective;
    for (const auto& [r, c] : records) {
      RankTally& t = ranks_[r];
      ++t.cycles;
      const double late = (first_in->wait_us - c->wait_us) / 1e6;
      const bool known = t.by_collective.count(collective) > 0;
      CollectiveTally& in = t.by_collective[known || t.by_collective.size() < kMaxCollectives
                                                ? collective
                                                : kOtherCollectives];
      ++in.cycles;
      if (late <= 0) continue;
      if (late >= kLastInSeconds) {
        ++t.late_cycles;
        ++in.late_cycles;
      }
      t.held_seconds += late;
      in.seconds += late;
      if (late > t.longest_seconds) {
        t.longest_seconds = late;
        t.longest_collective = collective;
        t.longest_at = at_seconds;
      }
    }
    const double held = (first_in->wait_us - last->wait_us) / 1e6;
    if (held >= kLastInSeconds) {
      ++ranks_[last_rank].last_in;
      last_ins.push_back({rank0_agreed, last_rank, held, collective});
    }
  }
  return last_ins;
}

std::vector<StragglerTally::Straggler> StragglerTally::Stragglers() const {
  std::vector<Straggler> out;
  double most = 0;
  for (const RankTally& t : ranks_) most = std::max(most, t.held_seconds);
  for (int r = 0; r < size_; ++r) {
    const RankTally& t = ranks_[r];
    if (t.held_seconds < kMinHeldSeconds || t.held_seconds < kMinShare * seconds_ ||
        t.held_seconds < kOfTheMost * most) {
      continue;
    }
    std::string kind = "at_times";
    const auto top = Largest(t.by_collective, 1);
    if (t.longest_seconds >= 0.5 * t.held_seconds) {
      kind = "once";
    } else if (!top.empty() && top[0].second.cycles >= kEveryStepCycles &&
               top[0].second.late_cycles >= kEveryStepShare * top[0].second.cycles) {
      kind = "every_step";
    }
    out.push_back({r, kind});
  }
  std::stable_sort(out.begin(), out.end(), [this](const Straggler& a, const Straggler& b) {
    return ranks_[a.rank].held_seconds > ranks_[b.rank].held_seconds;
  });
  return out;
}

std::string StragglerTally::Json() const {
  std::string s = "{\"windows\": " + std::to_string(windows_) + ", \"seconds\": " +
                  Num(seconds_) + ", \"cycles_compared\": " + std::to_string(cycles_compared_) +
                  ", \"cycles_uncounted\": " + std::to_string(cycles_uncounted_) +
                  ", \"stragglers\": [";
  const std::vector<Straggler> stragglers = Stragglers();
  for (size_t i = 0; i < stragglers.size(); ++i) {
    const RankTally& t = ranks_[stragglers[i].rank];
    s += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(stragglers[i].rank) +
         ", \"kind\": " + JsonString(stragglers[i].kind) + ", \"held_seconds\": " +
         Num(t.held_seconds) + ", \"share\": " +
         Num(seconds_ > 0 ? t.held_seconds / seconds_ : 0) + "}";
  }
  s += "], \"ranks\": {";
  for (int r = 0; r < size_; ++r) {
    const RankTally& t = ranks_[r];
    s += std::string(r ? ", " : "") + "\"" + std::to_string(r) + "\": {\"cycles\": " +
         std::to_string(t.cycles) + ", \"last_in\": " + std::to_string(t.last_in) +
         ", \"late_cycles\": " + std::to_string(t.late_cycles) + ", \"held_seconds\": " + Num(t.held_seconds) + ", \"longest\": {\"seconds\": " +
         Num(t.longest_seconds) + ", \"collective\": " + JsonString(t.longest_collective) +
         ", \"at_seconds\": " + Num(t.longest_at) + "}, \"by_collective\": {";
    const auto largest = Largest(t.by_collective, kShownCollectives);
    for (size_t i = 0; i < largest.size(); ++i) {
      if (largest[i].second.seconds <= 0) break;
      s += std::string(i ? ", " : "") + JsonString(largest[i].first) + ": " +
           Num(largest[i].second.seconds);
    }
    s += "}}";
  }
  s += "}, \"summary\": " + JsonString(Line()) + "}";
  return s;
}

std::string StragglerTally::Line() const {
  const std::vector<Straggler> stragglers = Stragglers();
  std::string s = "straggler report over " + Seconds(seconds_) + " (" +
                  std::to_string(cycles_compared_) + " cycles): ";
  if (stragglers.empty()) return s + "no rank holds the others back";
  for (size_t i = 0; i < stragglers.size(); ++i) {
    const Straggler& g = stragglers[i];
    const RankTally& t = ranks_[g.rank];
    const int percent = seconds_ > 0 ? static_cast<int>(100 * t.held_seconds / seconds_ + 0.5) : 0;
    s += std::string(i ? "; " : "") + "rank " + std::to_string(g.rank) +
         " held the others up " + Seconds(t.held_seconds) + " (" + std::to_string(percent) +
         "% of the time), ";
    if (g.kind == "every_step") {
      const auto top = Largest(t.by_collective, 1)[0];
      s += "slow every step: late in " + std::to_string(top.second.late_cycles) + " of the " +
           std::to_string(top.second.cycles) + " cycles of '" + top.first + "', " +
           Seconds(top.second.seconds / top.second.late_cycles) + " each on average";
    } else {
      s += std::string(g.kind == "once" ? "slow once" : "slow at times") + ": longest " +
           Seconds(t.longest_seconds) + " in '" + t.longest_collective + "' (" +
           Seconds(t.longest_at) + " into the report)";
    }
  }
  return s;
}

}  // namespace tfring
