#include "tfring/kernels/runtime/global_runtime.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "tfring/kernels/backends/mpi/mpi_backend.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/host_executor.h"
#include "tfring/kernels/runtime/flight_dump.h"

#if TFRING_WITH_NCCL
#include "tfring/kernels/backends/cuda/cuda_memory.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/core/staging_executor.h"
#endif

namespace tfring {
namespace {

// An initialized MPI backend owning `comm`.
Status NewMpiBackend(MPI_Comm comm, std::unique_ptr<MpiBackend>* out) {
  auto backend = std::make_unique<MpiBackend>(comm);
  TFRING_RETURN_IF_ERROR(backend->Init());
  *out = std::move(backend);
  return Status::OK();
}

// The executor for GPU tensors of the ranks of `parent` (the world, or a process set): NCCL,
// or MPI through host memory when asked for; none in builds without NCCL (then no GPU
// kernels are registered, and TensorFlow runs tfring's ops on the CPU, copying GPU tensors
// to the host and back itself). `world`: the runtime's own (not a process set's), whose NCCL
// communicator an elastic reset's next runtime may keep, shrink or grow.
Status NewDeviceExecutor(const Options& options, MPI_Comm parent, bool world,
                         std::unique_ptr<GroupExecutor>* out) {
#if TFRING_WITH_NCCL
  MPI_Comm dup, local_comm, cross_comm;
  ProcessLayout layout;
  TFRING_RETURN_IF_ERROR(MpiContext::SplitWithin(parent, &dup, &local_comm, &cross_comm, &layout));
  std::unique_ptr<MpiBackend> world_backend, local, cross;
  TFRING_RETURN_IF_ERROR(NewMpiBackend(dup, &world_backend));
  TFRING_RETURN_IF_ERROR(NewMpiBackend(local_comm, &local));
  TFRING_RETURN_IF_ERROR(NewMpiBackend(cross_comm, &cross));
  if (options.gpu_operations_through_mpi) {
    *out = std::make_unique<StagingExecutor>(
        std::make_unique<CudaMemory>(),
        std::make_unique<HostExecutor>(std::move(world_backend), layout.rank, layout.size),
        layout.rank,
        layout.size);
    return Status::OK();
  }
  std::unique_ptr<MpiFailureNotice> notice;
  TFRING_RETURN_IF_ERROR(MpiFailureNotice::Create(parent, &notice));
  *out = std::make_unique<NcclExecutor>(options, layout, std::move(world_backend),
                                        std::move(local), std::move(cross), std::move(notice),
                                        world);
#else
  (void)options;
  (void)parent;
  (void)world;
  out->reset();
#endif
  return Status::OK();
}

// The host backend over all ranks, hierarchical when asked for.
Status NewHostBackend(const Options& options, const MpiContext& mpi,
                      std::unique_ptr<MpiBackend>* out) {
  MPI_Comm data_comm;
  TFRING_RETURN_IF_ERROR(mpi.DupWorld(&data_comm));
  TFRING_RETURN_IF_ERROR(NewMpiBackend(data_comm, out));
  if (options.hierarchical_allreduce) {
    MPI_Comm local, cross;
    TFRING_RETURN_IF_ERROR(mpi.SplitLocal(&local));
    TFRING_RETURN_IF_ERROR(mpi.SplitCross(&cross));
    (*out)->UseHierarchicalAllreduce(local, cross);
  }
  return Status::OK();
}

// Makes a process set's executors: communicators over its members, created from a
// duplicate of the world that the factory keeps for this alone (freed with the factory).
// The members agree on the outcome, so that none runs the set's collectives alone.
ProcessSetFactory NewProcessSetFactory(const Options& options, MPI_Comm world) {
  std::shared_ptr<MPI_Comm> parent(new MPI_Comm(world), [](MPI_Comm* c) {
    MPI_Comm_free(c);
    delete c;
  });
  return [options, parent](const std::vector<int32_t>& members, SetExecutors* out) -> Status {
    MPI_Comm set_comm;
    TFRING_RETURN_IF_ERROR(MpiContext::CreateGroup(*parent, members, &set_comm));
    std::unique_ptr<GroupExecutor> device;
    std::unique_ptr<MpiBackend> host;
    Status s = NewDeviceExecutor(options, set_comm, /*world=*/false, &device);
    if (s.ok()) {
      MPI_Comm host_comm;
      s = MPI_Comm_dup(set_comm, &host_comm) == MPI_SUCCESS
              ? NewMpiBackend(host_comm, &host)
              : Status::Internal("MPI_Comm_dup of the process set's communicator failed");
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(set_comm, &rank);
    MPI_Comm_size(set_comm, &size);
    // The lowest member (position in the set) whose setup failed, or INT_MAX.
    int mine = s.ok() ? INT_MAX : rank, first_failed = INT_MAX;
    const int rc = MPI_Allreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, set_comm);
    MPI_Comm_free(&set_comm);
    if (s.ok() && rc != MPI_SUCCESS) {
      s = Status::Internal("agreeing on the setup of process set " + RankListString(members) +
                           " failed");
    } else if (s.ok() && first_failed != INT_MAX) {
      s = Status::FailedPrecondition(
          "setting up process set " + RankListString(members) + " failed on rank " +
          std::to_string(members[first_failed]) + " (its error there says why)");
    }
    TFRING_RETURN_IF_ERROR(s);
    out->host = std::make_unique<HostExecutor>(std::move(host), rank, size);
    out->device = std::move(device);
    return Status::OK();
  };
}

// Every rank learns whether `status` is OK everywhere; a rank whose own is OK but another's
// is not gets an error naming the lowest rank that failed.
Status AgreeAcrossRanks(const MpiContext& mpi, int rank, Status* status) {
  MPI_Comm comm;
  TFRING_RETURN_IF_ERROR(mpi.DupWorld(&comm));
  int mine = status->ok() ? INT_MAX : rank, first_failed = INT_MAX;
  const int rc = MPI_Allreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, comm);
  MPI_Comm_free(&comm);
  if (rc != MPI_SUCCESS) return Status::Internal("agreeing on tfring.init() across ranks failed");
  if (status->ok() && first_failed != INT_MAX) {
    *status = Status::FailedPrecondition("tfring.init() failed on rank " +
                                         std::to_string(first_failed) +
                                         " (its error there says why); no rank starts");
  }
  return Status::OK();
}

}  // namespace

GlobalRuntime::GlobalRuntime() : mpi_(std::make_unique<MpiContext>()) {}
GlobalRuntime::~GlobalRuntime() = default;

GlobalRuntime& GlobalRuntime::Get() {
  static GlobalRuntime* runtime = new GlobalRuntime();  // never destroyed: outlives TF kernels
  return *runtime;
}

Status GlobalRuntime::Init(const WorldChoice& world) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (coordinator_ && !coordinator_->stopped()) return Status::OK();
  if (coordinator_) {
    // Another rank shut tfring down, which stopped this rank's cycle too: every rank that
    // calls init() now starts anew, this one included.
    coordinator_->Shutdown();
    if (coordinator_->peer_lost()) peers_lost_ = true;
    new std::shared_ptr<Coordinator>(std::move(coordinator_));  // see Shutdown: not freed
  }
  if (peers_lost_) {
    // MPI_COMM_WORLD still holds the dead ranks; a communicator the application made of the
    // live ones (ULFM's revoke and shrink) is a world to start again on.
    if (world.kind != WorldChoice::Kind::kCommunicator) {
      return Status::FailedPrecondition(
          "tfring cannot be initialized again on the ranks it was started on: a peer rank was "
          "lost earlier in this job. Pass init(comm=...) a communicator of the ranks still "
          "alive (under mpirun --with-ft ulfm: comm.Revoke(), then comm.Shrink())");
    }
    mpi_->AbandonWorld();  // it holds a dead rank: freeing it could block
  }
  Options options;
  TFRING_RETURN_IF_ERROR(Options::FromEnvironment(&options));
  SetLogLevel(options.log_level);
  peer_timeout_seconds_ = options.peer_timeout_seconds;
  TFRING_RETURN_IF_ERROR(mpi_->Initialize(world, &layout_));
  SetLogRank(layout_.rank);
  MPI_Comm control_comm, sets_comm;
  TFRING_RETURN_IF_ERROR(mpi_->DupWorld(&control_comm));
  TFRING_RETURN_IF_ERROR(mpi_->DupWorld(&sets_comm));
  std::unique_ptr<MpiBackend> backend;
  TFRING_RETURN_IF_ERROR(NewHostBackend(options, *mpi_, &backend));
  auto control = std::make_unique<MpiControlPlane>(control_comm, options.peer_timeout_seconds);
  std::unique_ptr<GroupExecutor> device;
  TFRING_RETURN_IF_ERROR(NewDeviceExecutor(options, mpi_->world(), /*world=*/true, &device));
  shut_down_after_failure_ = false;
  coordinator_ = std::make_shared<Coordinator>(options, std::move(control), std::move(backend),
                                               std::move(device),
                                               NewProcessSetFactory(options, sets_comm));
  // Setup that can fail on some ranks only (rank 0's autotune log): agree before starting,
  // so that no rank runs a coordinator whose peers never will.
  Status mine = coordinator_->init_status();
  TFRING_RETURN_IF_ERROR(AgreeAcrossRanks(*mpi_, layout_.rank, &mine));
  if (!mine.ok()) {
    coordinator_.reset();
    return mine;
  }
  // Every failure that stops the cycle (a stall, a lost peer, a backend's error) dumps this
  // rank's flight recorder before any op fails, and the ops' error says where.
  FlightDump::Get().Configure(options.flight_recorder_dir.empty()
                                  ? DefaultFlightRecorderFolder()
                                  : options.flight_recorder_dir,
                              layout_.rank, layout_.size, coordinator_->flight_recorder());
  if (coordinator_->flight_recorder()->on()) {
    coordinator_->SetFailureDump([](const std::string& why) {
      std::string path;
      const Status s = FlightDump::Get().Dump(why, &path);
      if (!s.ok()) {
        TFRING_LOG(kWarning) << "flight recorder: " << s.message();
        return std::string();
      }
      return FlightDump::Get().Note();
    });
  }
  coordinator_->Start();
  if (!options.timeline_path.empty()) {
    const Status s = coordinator_->StartTimeline(options.timeline_path, options.timeline_mark_cycles);
    if (!s.ok()) {
      coordinator_->Shutdown();
      coordinator_.reset();
      return Status(s.code(), "TFRING_TIMELINE: " + s.message());
    }
  }
  TFRING_LOG(kDebug) << "initialized: size " << layout_.size << ", local rank "
                     << layout_.local_rank;
  return Status::OK();
}

void GlobalRuntime::Shutdown(bool for_reset) {
  StopCoordinator();
#if TFRING_WITH_NCCL
  if (!for_reset) {
    std::lock_guard<std::mutex> lock(mutex_);
    KeptWorld::Free(peers_lost_);  // the NCCL world kept for a next runtime, if any
  }
#else
  (void)for_reset;
#endif
}

void GlobalRuntime::StopCoordinator() {
  std::shared_ptr<Coordinator> coordinator;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    coordinator.swap(coordinator_);
  }
  if (!coordinator) return;
  coordinator->Shutdown();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shut_down_after_failure_ = coordinator->failed();
  }
  // An Enqueue that took its reference before the swap is finishing its call: after
  // Shutdown, the coordinator fails new entries at once. Wait for it, so that the
  // communicators are freed here (before MPI may be finalized), not on that thread later.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (coordinator.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  if (coordinator->peer_lost() || coordinator.use_count() > 1) {
    // The communicators are unusable (a lost peer: freeing them could block), or another
    // thread still holds the coordinator: leak it on purpose rather than free it under them.
    std::lock_guard<std::mutex> lock(mutex_);
    peers_lost_ = peers_lost_ || coordinator->peer_lost();
    new std::shared_ptr<Coordinator>(std::move(coordinator));
  }
}

void GlobalRuntime::AtExit() {
  Shutdown();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_lost_) mpi_->Finalize();
}

void GlobalRuntime::AtExitWithin(double seconds, bool finalize_anyway, int exit_status,
                                 const std::string& message) {
  auto give_up = [exit_status, message] {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    _exit(exit_status);
  };
  if (seconds <= 0) give_up();  // no wait at all: not even a finalize that would return
  // Shared with the timer thread, which may outlive this call (it is detached).
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([done, seconds, give_up] {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done->load()) give_up();
  }).detach();
  AtExit();
  if (finalize_anyway) {
    std::lock_guard<std::mutex> lock(mutex_);
    mpi_->FinalizeAnyway();
  }
  done->store(true);
}

bool GlobalRuntime::initialized() {
  std::lock_guard<std::mutex> lock(mutex_);
  return coordinator_ != nullptr;
}

bool GlobalRuntime::peer_lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return coordinator_ != nullptr && coordinator_->peer_lost();
}

bool GlobalRuntime::stopped_on_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peers_lost_) return false;
  if (coordinator_) return coordinator_->failed() && !coordinator_->peer_lost();
  return shut_down_after_failure_;
}

double GlobalRuntime::peer_timeout_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return peer_timeout_seconds_;
}

bool GlobalRuntime::mpi_threads_supported() {
  std::lock_guard<std::mutex> lock(mutex_);
  return coordinator_ != nullptr && mpi_->threads_supported();
}

ProcessLayout GlobalRuntime::layout() {
  std::lock_guard<std::mutex> lock(mutex_);
  return layout_;
}

bool GlobalRuntime::Acquire(Running* running) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!coordinator_) return false;
  running->coordinator = coordinator_;
  running->layout = layout_;
  return true;
}

Status GlobalRuntime::StartTimeline(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!coordinator_) {
    return NotInitialized("start_timeline()");
  }
  return coordinator_->StartTimeline(path, mark_cycles);
}

bool GlobalRuntime::TunedParamsNow(TunedParams* params) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!coordinator_) return false;
  *params = coordinator_->tuned_params();
  return true;
}

bool GlobalRuntime::StragglerReport(std::string* json) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!coordinator_) return false;
  *json = coordinator_->StragglerReport();
  return true;
}

void GlobalRuntime::StopTimeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (coordinator_) coordinator_->StopTimeline();
}

void GlobalRuntime::Enqueue(Entry entry, const OpCountdown* countdown) {
  std::vector<Entry> one;
  one.push_back(std::move(entry));
  EnqueueAll(std::move(one), countdown);
}

void GlobalRuntime::EnqueueAll(std::vector<Entry> entries, const OpCountdown* countdown) {
  std::shared_ptr<Coordinator> coordinator;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    coordinator = coordinator_;
  }
  if (!coordinator) {
    for (Entry& e : entries) {
      // Not yet queued, so not yet keyed: its string is made here.
      const std::string key = KeyString(e.request.key);
      e.done(NotInitialized("running '" + key + "'"));
    }
    return;
  }
  coordinator->EnqueueAll(std::move(entries), countdown);
}


}  // namespace tfring
