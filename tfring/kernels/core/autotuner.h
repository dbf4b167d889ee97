// Autotuner: picks the fusion threshold and cycle time for this job by measuring it
// (TFRING_AUTOTUNE=1), the way Horovod's autotuner does, with a plain grid instead of
// Bayesian optimization: the grid is small and each point is measured on the real job.
//
// Runs on rank 0 only, fed after every cycle that executed collectives. After warm-up
// samples, each candidate setting is measured for a few samples (a sample: at least
// sample_seconds and 3 executing cycles); its score is the median of its samples' throughput
// (bytes reduced/gathered/broadcast per second of wall time, the job's own work included).
// Then the best candidate is chosen and held for the rest of the job. Each change is handed
// to the coordinator (TakeChange), which sends it to every rank in a negotiation round so
// that all ranks switch at the same cycle (fusion plans must agree). Only performance knobs
// change: which tensors share a fusion buffer, and how long the thread waits for a burst;
// every tensor is reduced the same way whatever the setting.
//
// TFRING_AUTOTUNE_LOG=file.csv records each trial and the choice.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/common/status.h"

namespace tfring {

struct TunedParams {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool operator==(const TunedParams& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms;
  }
};

class Autotuner {
 public:
  // `candidates` empty: the default grid (fusion threshold 1, 4, 16, 64 MiB x cycle time
  // 0.25, 1, 4 ms).
  explicit Autotuner(const Options& options, std::vector<TunedParams> candidates = {});
  ~Autotuner();
  Status OpenLog(const std::string& path);

  // After a cycle that executed `bytes` of collectives (time in seconds, any epoch).
  void Record(int64_t bytes, double now_seconds);
  // A setting for every rank to switch to, when the tuner has moved on; the coordinator
  // sends it and calls Applied() once it is in force (measurements resume then).
  bool TakeChange(TunedParams* next);
  void Applied(double now_seconds);
  bool done() const { return done_; }
  const TunedParams& best() const { return best_; }
  const std::vector<TunedParams>& candidates() const { return candidates_; }

 private:
  void FinishSample(double now_seconds);
  void Log(const std::string& line);

  const double sample_seconds_;
  int warmup_left_;
  const int samples_per_trial_;
  std::vector<TunedParams> candidates_;
  size_t trial_ = 0;
  std::vector<double> samples_;
  std::vector<double> scores_;
  bool measuring_ = false;  // false while a change is on its way
  bool change_pending_ = false;
  TunedParams change_;
  double sample_start_ = 0;
  int64_t sample_bytes_ = 0;
  int sample_cycles_ = 0;
  bool done_ = false;
  TunedParams best_;
  std::FILE* log_ = nullptr;
};

}  // namespace tfring
