// Device allreduce through tfring's runtime (Coordinator + NcclExecutor) against NCCL called
// directly, on the same device buffers, in one run. No TensorFlow. Built in GPU builds as
// build/bench/nccl_allreduce:
//
//   mpirun -np <GPUs> build/bench/nccl_allreduce [size=64] [iterations=50] [tensors=1]
//
// The size is in MiB, or in bytes with a suffix: 4B, 16K, 1M, 256M (whole float32 values).
//
// With one tensor it times three ways of reducing it: ncclAllReduce, tfring's eager op (its
// caller waits for it alone, so the runtime starts it at once) and tfring's graph op (the
// runtime waits TFRING_BATCH_GAP_US for the rest of the burst first). With several tensors
// (the MiB split evenly) it times NCCL's grouped calls (ncclGroupStart/End) against one
// tfring grouped op, which fuses them into one NCCL call.
//
// Each side waits for its allreduce to finish before starting the next (tfring's op completes
// only then), so the times are what a training step sees. Median over the iterations, after
// five warm-ups. Bus bandwidth is NCCL's convention: bytes * 2 (n-1) / n / time; at n = 1 it
// is 0, and the algorithm bandwidth (bytes / time) is printed too.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
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
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"
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

std::unique_ptr<FailureNotice> Notice() {
  std::unique_ptr<MpiFailureNotice> notice;
  Check(MpiFailureNotice::Create(g_mpi.world(), &notice).ok(), "failure notice");
  return notice;
}

// "64" (MiB), "4B", "16K", "1M": bytes.
int64_t ParseSize(const char* arg) {
  char* end = nullptr;
  const int64_t n = std::strtoll(arg, &end, 10);
  switch (end == nullptr ? '\0' : *end) {
    case 'B': return n;
    case 'K': return n << 10;
    case 'G': return n << 30;
    default: return n << 20;  // "M" or no suffix
  }
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

// Median seconds of `iterations` calls of `once`, after five warm-ups; every rank starts
// together.
template <typename F>
double MedianSeconds(int iterations, F once) {
  for (int i = 0; i < 5; ++i) once();
  std::vector<double> times;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    times.push_back(Seconds(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int main(int argc, char** argv) {
  ProcessLayout layout;
  Check(g_mpi.Initialize(WorldChoice(), &layout).ok(), "MPI init");
  const int64_t bytes = argc > 1 ? ParseSize(argv[1]) : int64_t{64} << 20;
  const int iterations = std::max(1, argc > 2 ? std::atoi(argv[2]) : 50);
  const int tensors = std::max(1, argc > 3 ? std::atoi(argv[3]) : 1);
  const std::string why = CudaUnavailableReason();
  if (!why.empty()) {
    if (layout.rank == 0) std::printf("nccl_allreduce bench: skipped: %s\n", why.c_str());
    g_mpi.Finalize();
    return 0;
  }
  std::string no_device;
  const int device = testing::TestDevice(layout.local_rank, layout.local_size, &no_device);
  Check(device >= 0, no_device.c_str());
  Check(cudaSetDevice(device) == cudaSuccess, "cudaSetDevice");
  const int64_t count = bytes / 4, per_tensor = count / tensors;
  Check(per_tensor > 0, "splitting the MiB into that many tensors");
  char *in, *out;
  Check(cudaMalloc(reinterpret_cast<void**>(&in), bytes) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&out), bytes) == cudaSuccess,
        "cudaMalloc");
  Check(cudaMemset(in, 0, bytes) == cudaSuccess, "cudaMemset");

  // Raw NCCL: one call, or one call per tensor inside one NCCL group.
  ncclUniqueId id;
  if (layout.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  Check(ncclCommInitRank(&comm, layout.size, id, layout.rank) == ncclSuccess, "ncclCommInitRank");
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto raw_once = [&] {
    Check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    for (int t = 0; t < tensors; ++t) {
      const int64_t offset = t * per_tensor * 4;
      Check(ncclAllReduce(in + offset, out + offset, per_tensor, ncclFloat32, ncclSum, comm,
                          stream) == ncclSuccess,
            "ncclAllReduce");
    }
    Check(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
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
                                     MpiBackendOver(&MpiContext::SplitCross), Notice()));
  coordinator->Start();
  // TFRING_TIMELINE=<file>: rank 0 writes tfring's timeline of the whole run, as the library does.
  if (const char* timeline = std::getenv("TFRING_TIMELINE")) {
    Check(coordinator->StartTimeline(timeline, false).ok(), "starting the timeline");
  }
  // One op of `tensors` tensors; `eager` as the TF kernels set it.
  auto tfring_once = [&](bool eager) {
    std::vector<std::promise<Status>> done(tensors);
    OpCountdown countdown(tensors);  // counted down before each promise is kept
    std::vector<Entry> entries(tensors);
    for (int t = 0; t < tensors; ++t) {
      Entry& e = entries[t];
      e.request.key.name = "bench." + std::to_string(t);
      e.request.shape = {per_tensor};
      e.request.on_device = true;
      e.device = device;
      e.input = in + t * per_tensor * 4;
      e.output = out + t * per_tensor * 4;
      e.eager = eager;
      e.done = [&done, &countdown, t](const Status& s) {
        countdown.CountDown();
        done[t].set_value(s);
      };
    }
    coordinator->EnqueueAll(std::move(entries), &countdown);
    for (auto& d : done) {
      const Status s = d.get_future().get();
      Check(s.ok(), "tfring allreduce: " + s.ToString());
    }
  };

  struct Row {
    const char* name;
    double seconds;
  };
  std::vector<Row> rows;
  if (tensors == 1) {
    rows.push_back({"ncclAllReduce direct", MedianSeconds(iterations, raw_once)});
    rows.push_back({"tfring, eager op", MedianSeconds(iterations, [&] { tfring_once(true); })});
    rows.push_back({"tfring, graph op", MedianSeconds(iterations, [&] { tfring_once(false); })});
  } else {
    rows.push_back({"NCCL grouped calls", MedianSeconds(iterations, raw_once)});
    rows.push_back({"tfring grouped op", MedianSeconds(iterations, [&] { tfring_once(false); })});
  }
  std::vector<double> mine, slowest(rows.size());
  for (const Row& r : rows) mine.push_back(r.seconds);
  MPI_Allreduce(mine.data(), slowest.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  if (layout.rank == 0) {
    int version = 0;
    ncclGetVersion(&version);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    const double bus = 2.0 * (layout.size - 1) / layout.size;
    std::printf("device allreduce, float32 sum, %s in %d tensor(s), %d rank(s), %s, "
                "NCCL %d, median of %d\n",
                SizeName(bytes).c_str(), tensors, layout.size, prop.name, version, iterations);
    std::printf("%-22s %10s %14s %14s %10s\n", "", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                "vs NCCL");
    for (size_t k = 0; k < rows.size(); ++k) {
      std::printf("%-22s %10.1f %14.1f %14.1f %10.3f\n", rows[k].name, slowest[k] * 1e6,
                  bytes / slowest[k] / 1e9, bus * bytes / slowest[k] / 1e9,
                  slowest[0] / slowest[k]);
    }
  }
  coordinator->StopTimeline();
  coordinator->Shutdown();
  coordinator.reset();  // frees its communicators before MPI is finalized
  ncclCommDestroy(comm);
  cudaFree(in);
  cudaFree(out);
  g_mpi.Finalize();
  return 0;
}
