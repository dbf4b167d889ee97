// Bus bandwidth of a device allreduce through tfring's runtime (Coordinator + NcclExecutor)
// against ncclAllReduce called directly, on the same device buffers, in one run. No
// TensorFlow. Built in GPU builds as build/bench/nccl_allreduce:
//
//   mpirun -np <GPUs> build/bench/nccl_allreduce [MiB=64] [iterations=50]
//
// Both sides wait for each allreduce to finish before starting the next (tfring's op
// completes only then), so the ratio is what a training step sees. Bus bandwidth is NCCL's
// convention: bytes * 2 (n-1) / n / time; at n = 1 it is 0, and the algorithm bandwidth
// (bytes / time) is printed too.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>

#include "tfring/kernels/backends/cuda/cuda_memory.h"
#include "tfring/kernels/backends/mpi/mpi_backend.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/core/coordinator.h"

using namespace tfring;

namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "nccl_allreduce bench: %s failed\n", what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

MpiContext g_mpi;

std::unique_ptr<MpiBackend> MpiBackendOver(Status (MpiContext::*make)(MPI_Comm*) const) {
  MPI_Comm comm;
  Check((g_mpi.*make)(&comm).ok(), "communicator");
  auto b = std::make_unique<MpiBackend>(comm);
  Check(b->Init().ok(), "MPI backend");
  return b;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  ProcessLayout layout;
  Check(g_mpi.Initialize(WorldChoice(), &layout).ok(), "MPI init");
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 64;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 50;
  const std::string why = CudaUnavailableReason();
  if (!why.empty()) {
    if (layout.rank == 0) std::printf("nccl_allreduce bench: skipped: %s\n", why.c_str());
    g_mpi.Finalize();
    return 0;
  }
  const int device = layout.local_rank;
  Check(cudaSetDevice(device) == cudaSuccess, "cudaSetDevice");
  const int64_t bytes = mib << 20, count = bytes / 4;
  void *in, *out;
  Check(cudaMalloc(&in, bytes) == cudaSuccess && cudaMalloc(&out, bytes) == cudaSuccess, "cudaMalloc");
  Check(cudaMemset(in, 0, bytes) == cudaSuccess, "cudaMemset");

  // Raw NCCL.
  ncclUniqueId id;
  if (layout.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  Check(ncclCommInitRank(&comm, layout.size, id, layout.rank) == ncclSuccess, "ncclCommInitRank");
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto raw_once = [&] {
    Check(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
          "ncclAllReduce");
    Check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");
  };

  // tfring's runtime.
  Options options;
  options.stall_check_time_seconds = 0;
  MPI_Comm control;
  Check(g_mpi.DupWorld(&control).ok(), "control communicator");
  auto coordinator = std::make_unique<Coordinator>(
      options, std::make_unique<MpiControlPlane>(control, options.peer_timeout_seconds),
      MpiBackendOver(&MpiContext::DupWorld),
      std::make_unique<NcclExecutor>(options, layout, MpiBackendOver(&MpiContext::DupWorld),
                                     MpiBackendOver(&MpiContext::SplitLocal),
                                     MpiBackendOver(&MpiContext::SplitCross)));
  coordinator->Start();
  auto tfring_once = [&] {
    std::promise<Status> done;
    Entry e;
    e.request.name = "bench";
    e.request.shape = {count};
    e.request.on_device = true;
    e.device = device;
    e.input = in;
    e.output = out;
    e.done = [&done](const Status& s) { done.set_value(s); };
    coordinator->Enqueue(std::move(e));
    const Status s = done.get_future().get();
    Check(s.ok(), "tfring allreduce: " + s.ToString());
  };

  double raw_s = 0, tfring_s = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 warms both up
    const int n = round == 0 ? 5 : iterations;
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) raw_once();
    raw_s = Seconds(start) / n;
    MPI_Barrier(MPI_COMM_WORLD);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) tfring_once();
    tfring_s = Seconds(start) / n;
  }
  double times[2] = {raw_s, tfring_s}, slowest[2];
  MPI_Allreduce(times, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (layout.rank == 0) {
    int version = 0;
    ncclGetVersion(&version);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    const double bus = 2.0 * (layout.size - 1) / layout.size;
    std::printf("device allreduce, float32 sum, %lld MiB, %d rank(s), %s, NCCL %d, %d iterations\n",
                static_cast<long long>(mib), layout.size, prop.name, version, iterations);
    std::printf("%-22s %10s %14s %14s\n", "", "time (ms)", "algbw (GB/s)", "busbw (GB/s)");
    const char* names[2] = {"ncclAllReduce direct", "tfring runtime"};
    for (int k = 0; k < 2; ++k) {
      std::printf("%-22s %10.3f %14.1f %14.1f\n", names[k], slowest[k] * 1e3,
                  bytes / slowest[k] / 1e9, bus * bytes / slowest[k] / 1e9);
    }
    std::printf("tfring / direct bandwidth: %.3f\n", slowest[0] / slowest[1]);
  }
  coordinator->Shutdown();
  coordinator.reset();  // frees its communicators before MPI is finalized
  ncclCommDestroy(comm);
  cudaFree(in);
  cudaFree(out);
  g_mpi.Finalize();
  return 0;
}
