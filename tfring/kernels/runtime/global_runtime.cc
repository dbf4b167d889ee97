#include "tfring/kernels/runtime/global_runtime.h"

#include "tfring/kernels/backends/mpi/mpi_backend.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {

GlobalRuntime& GlobalRuntime::Get() {
  static GlobalRuntime* runtime = new GlobalRuntime();  // never destroyed: outlives TF kernels
  return *runtime;
}

Status GlobalRuntime::Init() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (coordinator_) return Status::OK();
  if (peers_lost_) {
    return Status::FailedPrecondition(
        "tfring cannot be initialized again: a peer rank was lost earlier in this job");
  }
  Options options;
  TFRING_RETURN_IF_ERROR(Options::FromEnvironment(&options));
  SetLogLevel(options.log_level);
  TFRING_RETURN_IF_ERROR(MpiContext::Initialize(&layout_));
  SetLogRank(layout_.rank);
  MPI_Comm control_comm, data_comm;
  TFRING_RETURN_IF_ERROR(MpiContext::DupWorld(&control_comm));
  TFRING_RETURN_IF_ERROR(MpiContext::DupWorld(&data_comm));
  auto backend = std::make_unique<MpiBackend>(data_comm);
  TFRING_RETURN_IF_ERROR(backend->Init());
  auto control = std::make_unique<MpiControlPlane>(control_comm, options.peer_timeout_seconds);
  coordinator_ = std::make_unique<Coordinator>(options, std::move(control), std::move(backend));
  coordinator_->Start();
  TFRING_LOG(kDebug) << "initialized: size " << layout_.size << ", local rank "
                     << layout_.local_rank;
  return Status::OK();
}

void GlobalRuntime::Shutdown() {
  std::unique_ptr<Coordinator> coordinator;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    coordinator.swap(coordinator_);
  }
  if (!coordinator) return;
  coordinator->Shutdown();
  if (coordinator->peer_lost()) {
    // The communicators are unusable; freeing them could block. Leak them on purpose.
    std::lock_guard<std::mutex> lock(mutex_);
    peers_lost_ = true;
    coordinator.release();
  }
}

void GlobalRuntime::AtExit() {
  Shutdown();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_lost_) MpiContext::Finalize();
}

bool GlobalRuntime::initialized() {
  std::lock_guard<std::mutex> lock(mutex_);
  return coordinator_ != nullptr;
}

ProcessLayout GlobalRuntime::layout() {
  std::lock_guard<std::mutex> lock(mutex_);
  return layout_;
}

void GlobalRuntime::Enqueue(Entry entry) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!coordinator_) {
    lock.unlock();
    entry.done(Status::FailedPrecondition("tfring has not been initialized: call tfring.init() "
                                          "before running '" + entry.request.name + "'"));
    return;
  }
  Coordinator* c = coordinator_.get();
  lock.unlock();
  c->Enqueue(std::move(entry));
}

}  // namespace tfring
