#include "tfring/kernels/core/autotuner.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tfring {
namespace {

constexpr int kMinCyclesPerSample = 3;

std::vector<TunedParams> DefaultGrid() {
  std::vector<TunedParams> grid;
  for (int64_t mib : {1, 4, 16, 64}) {
    for (double ms : {0.25, 1.0, 4.0}) grid.push_back({mib * 1024 * 1024, ms});
  }
  return grid;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Autotuner::Autotuner(const Options& options, std::vector<TunedParams> candidates)
    : sample_seconds_(options.autotune_sample_seconds),
      warmup_left_(options.autotune_warmup_samples),
      samples_per_trial_(std::max<int>(1, options.autotune_samples_per_trial)),
      candidates_(candidates.empty() ? DefaultGrid() : std::move(candidates)) {
  // The first candidate goes out at once; warm-up samples are taken under it.
  change_ = candidates_[0];
  change_pending_ = true;
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

Status Autotuner::OpenLog(const std::string& path) {
  log_ = std::fopen(path.c_str(), "w");
  if (log_ == nullptr) {
    return Status::InvalidArgument("cannot write TFRING_AUTOTUNE_LOG='" + path +
                                   "': " + std::strerror(errno));
  }
  Log("trial,fusion_threshold_bytes,cycle_time_ms,samples,bytes_per_second,chosen");
  return Status::OK();
}

void Autotuner::Log(const std::string& line) {
  if (!log_) return;
  std::fputs((line + "\n").c_str(), log_);
  std::fflush(log_);
}

bool Autotuner::TakeChange(TunedParams* next) {
  if (!change_pending_) return false;
  *next = change_;
  change_pending_ = false;
  return true;
}

void Autotuner::Applied(double now_seconds) {
  if (done_) return;
  measuring_ = true;
  sample_start_ = now_seconds;
  sample_bytes_ = 0;
  sample_cycles_ = 0;
}

void Autotuner::Record(int64_t bytes, double now_seconds) {
  if (done_ || !measuring_) return;
  sample_bytes_ += bytes;
  ++sample_cycles_;
  if (now_seconds - sample_start_ >= sample_seconds_ && sample_cycles_ >= kMinCyclesPerSample) {
    FinishSample(now_seconds);
  }
}

void Autotuner::FinishSample(double now_seconds) {
  const double score = sample_bytes_ / std::max(1e-9, now_seconds - sample_start_);
  sample_start_ = now_seconds;
  sample_bytes_ = 0;
  sample_cycles_ = 0;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  samples_.push_back(score);
  if (static_cast<int>(samples_.size()) < samples_per_trial_) return;
  const TunedParams& p = candidates_[trial_];
  const double trial_score = Median(samples_);
  scores_.push_back(trial_score);
  Log(std::to_string(trial_) + "," + std::to_string(p.fusion_threshold_bytes) + "," +
      std::to_string(p.cycle_time_ms) + "," + std::to_string(samples_.size()) + "," +
      std::to_string(trial_score) + ",0");
  samples_.clear();
  measuring_ = false;
  if (++trial_ < candidates_.size()) {
    change_ = candidates_[trial_];
  } else {
    const size_t best = std::max_element(scores_.begin(), scores_.end()) - scores_.begin();
    best_ = candidates_[best];
    change_ = best_;
    done_ = true;
    Log(std::to_string(best) + "," + std::to_string(best_.fusion_threshold_bytes) + "," +
        std::to_string(best_.cycle_time_ms) + "," + std::to_string(samples_per_trial_) + "," +
        std::to_string(scores_[best]) + ",1");
  }
  change_pending_ = true;
}

}  // namespace tfring
