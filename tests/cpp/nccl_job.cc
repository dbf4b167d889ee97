#include "tests/cpp/nccl_job.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // MPIX_Comm_revoke, MPIX_Comm_shrink (ULFM)
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/cpp/gpu_ranks.h"
#include "tfring/kernels/backends/cuda/cuda_memory.h"
#include "tfring/kernels/backends/mpi/mpi_backend.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/host_executor.h"
#include "tfring/kernels/core/staging_executor.h"

namespace tfring {
namespace testing {
namespace {

using MakeComm = Status (MpiContext::*)(MPI_Comm*) const;

std::unique_ptr<MpiBackend> MpiBackendOver(const MpiContext& mpi, MakeComm make) {
  MPI_Comm comm;
  Status s = (mpi.*make)(&comm);
  if (!s.ok()) DieInSetup("an MPI communicator", s);
  auto b = std::make_unique<MpiBackend>(comm);
  if (!(s = b->Init()).ok()) DieInSetup("an MPI backend", s);
  return b;
}

std::unique_ptr<MpiControlPlane> ControlPlane(const MpiContext& mpi, const Options& options) {
  MPI_Comm control;
  const Status s = mpi.DupWorld(&control);
  if (!s.ok()) DieInSetup("the control plane's communicator", s);
  return std::make_unique<MpiControlPlane>(control, options.peer_timeout_seconds);
}

}  // namespace

bool ReshapeOff() {
  const char* v = std::getenv("TFRING_NCCL_RESHAPE");
  return v != nullptr && std::string(v) == "off";
}

std::string ExpectedWorldMade(const std::string& way, bool has_call) {
  // A run that makes a reshaping call fail on purpose (the host GPU's
  // TFRING_HOST_GPU_RESHAPE_FAULT) says what tfring's fallback must give instead.
  const char* expected = std::getenv("TFRING_TEST_EXPECT_WORLD");
  if (expected != nullptr && *expected != '\0') return expected;
  return has_call && !ReshapeOff() ? way : "made anew";
}

std::string WorldMade() { return KeptWorld::LastMade(); }

bool ShrinkScenarioToSurvivors(std::string* why) {
#if defined(MPIX_ERR_PROC_FAILED)
  MPI_Comm world = Scenario().mpi.world(), alive = MPI_COMM_NULL;
  MPIX_Comm_revoke(world);
  if (MPIX_Comm_shrink(world, &alive) != MPI_SUCCESS) {
    *why = "MPIX_Comm_shrink failed";
    return false;
  }
  Scenario().mpi.AbandonWorld();
  WorldChoice choice;
  choice.kind = WorldChoice::Kind::kCommunicator;
  choice.fortran_handle = MPI_Comm_c2f(alive);
  const Status again = Scenario().mpi.Initialize(choice, &Scenario().layout);
  if (!again.ok()) *why = again.ToString();
  return again.ok();
#else
  *why = "this MPI has no ULFM (MPIX_Comm_shrink)";
  return false;
#endif
}

void DieInSetup(const char* who, const Status& s) {
  std::fprintf(stderr, "setting up %s failed: %s\n", who, s.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; the compiler cannot know
}

std::unique_ptr<Coordinator> NewNcclCoordinator(const MpiContext& mpi, const ProcessLayout& layout,
                                                Options options, bool keep_world) {
  options.stall_check_time_seconds = 0;
  options.nccl_reshape_off = ReshapeOff();
  std::unique_ptr<MpiFailureNotice> notice;
  const Status s = MpiFailureNotice::Create(mpi.world(), &notice);
  if (!s.ok()) DieInSetup("the failure notice", s);
  auto executor = std::make_unique<NcclExecutor>(
      options, layout, MpiBackendOver(mpi, &MpiContext::DupWorld),
      MpiBackendOver(mpi, &MpiContext::SplitLocal), MpiBackendOver(mpi, &MpiContext::SplitCross),
      std::move(notice), keep_world);
  auto c = std::make_unique<Coordinator>(options, ControlPlane(mpi, options),
                                         MpiBackendOver(mpi, &MpiContext::DupWorld),
                                         std::move(executor));
  c->Start();
  return c;
}

std::unique_ptr<Coordinator> NewStagingCoordinator(const MpiContext& mpi,
                                                   const ProcessLayout& layout, Options options) {
  options.stall_check_time_seconds = 0;
  options.gpu_operations_through_mpi = true;
  auto executor = std::make_unique<StagingExecutor>(
      std::make_unique<CudaMemory>(),
      std::make_unique<HostExecutor>(MpiBackendOver(mpi, &MpiContext::DupWorld), layout.rank,
                                     layout.size),
      layout.rank, layout.size);
  auto c = std::make_unique<Coordinator>(options, ControlPlane(mpi, options),
                                         MpiBackendOver(mpi, &MpiContext::DupWorld),
                                         std::move(executor));
  c->Start();
  return c;
}

ScenarioJob& Scenario() {
  static ScenarioJob job;
  return job;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void* ZeroedDeviceBuffer(int64_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {  // set before tfring's stream reads it
    DieInSetup("device memory", Status::Internal("cudaMalloc of " + std::to_string(bytes)));
  }
  return p;
}

std::future<Status> SubmitDeviceAllreduce(Coordinator* c, const std::string& name, int64_t count,
                                          void* in, void* out) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> status = done->get_future();
  Entry e;
  e.request.key.name = name;
  e.request.dtype = DataType::kFloat32;
  e.request.shape = {count};
  e.request.on_device = true;
  e.device = Scenario().device;
  e.input = in;
  e.output = out;
  e.done = [done](const Status& s) { done->set_value(s); };
  c->Enqueue(std::move(e));
  return status;
}

// An allreduce (Sum) of 1024 floats, each this rank's rank + 1, on device buffers: the status,
// and whether every element came back as the sum over the world's ranks.
Status DeviceSumOfRanks(Coordinator* c, const std::string& name, bool* right) {
  const int64_t count = 1024;
  std::vector<float> host(count, static_cast<float>(Scenario().layout.rank + 1));
  void *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, count * 4) != cudaSuccess || cudaMalloc(&out, count * 4) != cudaSuccess ||
      cudaMemcpy(in, host.data(), count * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {  // landed before tfring's stream reads it
    DieInSetup("device memory", Status::Internal("cudaMalloc/cudaMemcpy failed"));
  }
  std::future<Status> status = SubmitDeviceAllreduce(c, name, count, in, out);
  Status s = status.wait_for(std::chrono::seconds(30)) == std::future_status::ready
                 ? status.get()
                 : Status::DeadlineExceeded("'" + name + "' did not end in 30 s");
  const float want = Scenario().layout.size * (Scenario().layout.size + 1) / 2.0f;
  *right = s.ok() && cudaMemcpy(host.data(), out, count * 4, cudaMemcpyDeviceToHost) ==
                         cudaSuccess;
  for (float v : host) *right = *right && v == want;
  cudaFree(in);
  cudaFree(out);
  return s;
}

void SurvivorsGpuEnvironment::SetUp() {
  ScenarioJob& job = Scenario();
  const Status s = job.mpi.Initialize(WorldChoice(), &job.layout);
  if (!s.ok()) DieInSetup("MPI", s);
  SetLogRank(job.layout.rank);
  std::string skip = CudaUnavailableReason();
  if (skip.empty()) job.device = TestDevice(job.layout.local_rank, job.layout.local_size, &skip);
  if (skip.empty()) skip = Unsupported();
  int mine = skip.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, job.mpi.world());
  if (any) {
    job.skip = skip.empty() ? "another rank cannot run it" : skip;
    return;
  }
  if (cudaSetDevice(job.device) != cudaSuccess) {
    DieInSetup("the GPU", Status::Internal("cannot use GPU " + std::to_string(job.device)));
  }
}

void SurvivorsGpuEnvironment::TearDown() {
  // As tfring.elastic's workers do (tfring/_elastic/process_end.py): needed in about one run
  // in three of scenario_nccl_reset on Open MPI 5.0.11 (7 of 20, 2026-12-03).
  EndWithinSeconds(5, "MPI_Finalize did not return within 5 s after a rank was lost (Open "
                      "MPI's fault tolerance can leave it waiting)");
  Scenario().mpi.Finalize();
}

std::string SurvivorsGpuEnvironment::SkipReason() const { return Scenario().skip; }

bool SurvivorsGpuEnvironment::verbose() const { return Scenario().layout.rank == 0; }

}  // namespace testing
}  // namespace tfring
