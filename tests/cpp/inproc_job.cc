#include "tests/cpp/inproc_job.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "tests/cpp/inproc/inproc_backend.h"
#include "tests/cpp/inproc/inproc_control_plane.h"
#include "tfring/kernels/core/staging_executor.h"

namespace tfring {
namespace testing {
namespace {

// Counts negotiation rounds (gathers) on the way to the real control plane.
class CountingControlPlane : public ControlPlane {
 public:
  CountingControlPlane(std::unique_ptr<ControlPlane> inner, std::atomic<int64_t>* rounds)
      : inner_(std::move(inner)), rounds_(rounds) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status AllreduceAnd(std::vector<uint64_t>* words) override {
    return inner_->AllreduceAnd(words);
  }
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override {
    ++*rounds_;
    return inner_->GatherToRoot(mine, all);
  }
  Status BroadcastFromRoot(std::string* bytes) override {
    return inner_->BroadcastFromRoot(bytes);
  }

 private:
  std::unique_ptr<ControlPlane> inner_;
  std::atomic<int64_t>* rounds_;
};

// One InprocWorld per process set, made by the first member that asks, shared by all.
class SetWorlds {
 public:
  explicit SetWorlds(double timeout_seconds) : timeout_seconds_(timeout_seconds) {}
  std::shared_ptr<InprocWorld> For(const std::vector<int32_t>& members) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& world = worlds_[members];
    if (!world) world = std::make_shared<InprocWorld>(static_cast<int>(members.size()),
                                                      timeout_seconds_);
    return world;
  }

 private:
  const double timeout_seconds_;
  std::mutex mutex_;
  std::map<std::vector<int32_t>, std::shared_ptr<InprocWorld>> worlds_;
};

// The factory of rank `rank`: host executors over its set's world, at its position there.
ProcessSetFactory InprocSetFactory(std::shared_ptr<SetWorlds> worlds, int rank) {
  return [worlds, rank](const std::vector<int32_t>& members, SetExecutors* out) -> Status {
    const int position = static_cast<int>(
        std::lower_bound(members.begin(), members.end(), rank) - members.begin());
    const int size = static_cast<int>(members.size());
    out->host = std::make_unique<HostExecutor>(
        std::make_unique<InprocBackend>(worlds->For(members), position), position, size);
    return Status::OK();
  };
}

}  // namespace

InprocJob::InprocJob(int size, const Options& options, double world_timeout_seconds)
    : InprocJob(size, options, nullptr, world_timeout_seconds) {}

InprocJob::InprocJob(int size, const Options& options,
                     FakeDeviceMemory::Counters* device_counters, double world_timeout_seconds)
    : InprocJob(size, options, device_counters, world_timeout_seconds, Wrappers{}) {}

InprocJob::InprocJob(int size, const Options& options, const WrapBackend& wrap)
    : InprocJob(size, options, nullptr, 20.0, Wrappers{nullptr, wrap}) {}

InprocJob::InprocJob(int size, const Options& options, const Wrappers& wrap,
                     double world_timeout_seconds)
    : InprocJob(size, options, nullptr, world_timeout_seconds, wrap) {}

InprocJob::InprocJob(int size, const Options& options,
                     FakeDeviceMemory::Counters* device_counters, double world_timeout_seconds,
                     const Wrappers& wrap) {
  auto control_world = std::make_shared<InprocWorld>(size, world_timeout_seconds);
  auto data_world = std::make_shared<InprocWorld>(size, world_timeout_seconds);
  auto device_world = std::make_shared<InprocWorld>(size, world_timeout_seconds);
  auto set_worlds = std::make_shared<SetWorlds>(world_timeout_seconds);
  for (int r = 0; r < size; ++r) {
    rounds_.push_back(std::make_unique<std::atomic<int64_t>>(0));
    std::unique_ptr<GroupExecutor> device;
    if (device_counters != nullptr) {
      device = std::make_unique<StagingExecutor>(
          std::make_unique<FakeDeviceMemory>(device_counters),
          std::make_unique<HostExecutor>(std::make_unique<InprocBackend>(device_world, r), r,
                                         size),
          r, size);
    }
    std::unique_ptr<Backend> backend = std::make_unique<InprocBackend>(data_world, r);
    if (wrap.backend) backend = wrap.backend(std::move(backend), r);
    std::unique_ptr<ControlPlane> control_plane =
        std::make_unique<InprocControlPlane>(control_world, r);
    if (wrap.control_plane) control_plane = wrap.control_plane(std::move(control_plane), r);
    coordinators_.push_back(std::make_unique<Coordinator>(
        options,
        std::make_unique<CountingControlPlane>(std::move(control_plane), rounds_.back().get()),
        std::move(backend), std::move(device), InprocSetFactory(set_worlds, r)));
  }
  for (auto& c : coordinators_) c->Start();
}

InprocJob::~InprocJob() { Shutdown(); }

void InprocJob::OnEveryRank(const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

void InprocJob::Shutdown() {
  OnEveryRank([this](int r) { coordinators_[r]->Shutdown(); });
}

Options TestOptions() {
  Options o;
  o.stall_check_time_seconds = 0;
  // Its exchange is a gather of its own, which tests that count negotiation rounds would
  // see; test_straggler_watch_inproc turns it on.
  o.straggler_window_seconds = 0;
  return o;
}

}  // namespace testing
}  // namespace tfring
