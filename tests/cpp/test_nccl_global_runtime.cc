// The GPU path through the runtime the TF kernels use (runtime/global_runtime.h: the NCCL
// executor of the world and of each process set, made as tfring.init() makes them), over
// real NCCL, no TensorFlow. One rank per GPU, or ranks sharing one (tools/gpu_ranks.sh):
//
//   tools/gpu_ranks.sh 4 build/tests/test_nccl_global_runtime
//
// What test_nccl_runtime.cc leaves out: alltoall through ncclSend/ncclRecv (uneven, zero
// rows, a rank's rows to itself), a process set's own communicator, integer sums that wrap,
// a producer busier than the peer timeout (not a failure: the timeout counts from the
// inputs being ready), and an error on one rank after the ranks agreed to run a group,
// which fails it on every rank at once with that rank's reason. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/gpu_ranks.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/nccl_test_ops.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/cuda/cuda_memory.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/runtime/global_runtime.h"

namespace tfring {
namespace testing {
namespace {

GlobalRuntime& Runtime() { return GlobalRuntime::Get(); }
GpuPlace g_at;
std::string g_skip;

// Starts the runtime with TFRING_PEER_TIMEOUT_SECONDS=`peer_timeout` (it reads its settings
// from the environment, as tfring.init() does); every rank, in step.
void StartRuntime(int peer_timeout) {
  setenv("TFRING_PEER_TIMEOUT_SECONDS", std::to_string(peer_timeout).c_str(), 1);
  const Status s = Runtime().Init();
  if (!s.ok()) {
    std::fprintf(stderr, "test_nccl_global_runtime: init failed: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// As tfring.elastic does: the NCCL world is left for the new runtime (kept as it is here).
void RestartRuntime(int peer_timeout) {
  Runtime().Shutdown(/*for_reset=*/true);
  StartRuntime(peer_timeout);
}

class GlobalNcclEnvironment : public Environment {
 public:
  void SetUp() override {
    StartRuntime(30);
    const ProcessLayout layout = Runtime().layout();
    std::string skip = CudaUnavailableReason();
    int device = -1;
    if (skip.empty()) device = TestDevice(layout.local_rank, layout.local_size, &skip);
    int mine = skip.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
      g_skip = skip.empty() ? "another rank has no usable GPU" : skip;
      return;
    }
    g_at = GpuPlace{device, nullptr, layout.rank, layout.size};
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&g_at.producer, cudaStreamNonBlocking) != cudaSuccess) {
      std::fprintf(stderr, "cannot use GPU %d\n", device);
      std::exit(1);
    }
  }
  void TearDown() override { Runtime().AtExit(); }
  std::string SkipReason() const override { return g_skip; }
  bool verbose() const override { return g_at.rank == 0; }
  bool FailedAnywhere(bool failed_here) override {
    int mine = failed_here ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any != 0;
  }
};
TFRING_TEST_ENVIRONMENT(GlobalNcclEnvironment);

const EnqueueFn kEnqueue = [](Entry e) { Runtime().Enqueue(std::move(e)); };

EnqueueFn InSet(const std::vector<int32_t>& members) {
  return [members](Entry e) {
    e.request.key.set = members;
    Runtime().Enqueue(std::move(e));
  };
}

// Rows rank `from` sends rank `to`: 0, 1 or 2, so that some pairs send none, every rank
// sends itself one (a send and a receive to itself in one NCCL group, as every even split
// makes), and the splits differ between ranks.
int64_t Rows(int from, int to) { return (from + 2 * to + 1) % 3; }

TFRING_TEST(NcclGlobal, AlltoallUnevenWithZeroRowsAndRowsToItself) {
  const int me = g_at.rank, size = g_at.size;
  constexpr int64_t kRow = 3;
  std::vector<int32_t> input;
  std::vector<int64_t> splits;
  for (int q = 0; q < size; ++q) {
    splits.push_back(Rows(me, q));
    for (int64_t k = 0; k < Rows(me, q) * kRow; ++k) input.push_back(1000 * me + 100 * q + k);
  }
  auto received = std::make_shared<std::vector<int64_t>>();
  OpPtr op = SubmitAlltoallOnGpu(kEnqueue, g_at, "a2a.uneven", input, kRow, splits, received);
  const Status s = WaitFor(op, 30.0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<int64_t> want;
  for (int q = 0; q < size; ++q) {
    EXPECT_EQ((*received)[q], Rows(q, me)) << "rows from rank " << q;
    for (int64_t k = 0; k < Rows(q, me) * kRow; ++k) want.push_back(1000 * q + 100 * me + k);
  }
  EXPECT_TRUE(op->IntResult() == want) << "rank " << me << " got the wrong rows";
}

// Every rank sends a row to every rank. NCCL's sends wait for their receivers (the host
// GPU's too), so the sends and receives must be one group: otherwise each rank's first send
// waits for a peer that is itself in its first send.
TFRING_TEST(NcclGlobal, AlltoallEveryRankToEveryRank) {
  const int me = g_at.rank, size = g_at.size;
  constexpr int64_t kRow = 4;
  std::vector<int32_t> input;
  std::vector<int64_t> splits(size, 1);
  for (int q = 0; q < size; ++q) {
    for (int64_t k = 0; k < kRow; ++k) input.push_back(1000 * me + 100 * q + k);
  }
  auto received = std::make_shared<std::vector<int64_t>>();
  OpPtr op = SubmitAlltoallOnGpu(kEnqueue, g_at, "a2a.even", input, kRow, splits, received);
  const Status s = WaitFor(op, 30.0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<int64_t> want;
  for (int q = 0; q < size; ++q) {
    EXPECT_EQ((*received)[q], 1) << "rows from rank " << q;
    for (int64_t k = 0; k < kRow; ++k) want.push_back(1000 * q + 100 * me + k);
  }
  EXPECT_TRUE(op->IntResult() == want) << "rank " << me << " got the wrong rows";
}

// A set of the first and third rank ({0, 2} of 3 or 4; the first and last at fewer) runs
// on a NCCL communicator of its own, while the other ranks run a world collective.
TFRING_TEST(NcclGlobal, ProcessSetRunsOnItsOwnCommunicator) {
  const int me = g_at.rank, size = g_at.size;
  std::vector<int32_t> members = {0};
  if (size >= 2) members.push_back(size >= 3 ? 2 : 1);
  const bool member = me == 0 || me == members.back();
  for (int step = 0; step < 3; ++step) {
    const std::string name = "set.sum." + std::to_string(step);
    if (member) {
      OpPtr in_set = SubmitOnGpu(InSet(members), g_at, name, DataType::kFloat32, {5},
                                 TestValues(DataType::kFloat32, me, 5, step), GpuRequest{});
      const Status s = WaitFor(in_set, 30.0);
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::vector<double> want(5, 0.0);
      for (int32_t m : members) {
        const std::vector<double> v = TestValues(DataType::kFloat32, m, 5, step);
        for (int i = 0; i < 5; ++i) want[i] += v[i];
      }
      std::string why;
      EXPECT_TRUE(AllClose(DataType::kFloat32, in_set->Result(), want, &why)) << name << ": " << why;
    }
    // Every rank, members too: the world's communicator beside the set's.
    OpPtr world = SubmitOnGpu(kEnqueue, g_at, "world.after." + std::to_string(step),
                              DataType::kFloat32, {4}, TestValues(DataType::kFloat32, me, 4, step),
                              GpuRequest{});
    ExpectAllreduced(world, ReduceOp::kSum, size, step);
  }
}

// Integer sums and products wrap modulo 2^bits on NCCL as on the host, and an integer
// Average is the wrapped sum divided toward zero (on the host, after NCCL's sum).
TFRING_TEST(NcclGlobal, IntegerSumsAndProductsWrapAtOverflow) {
  const int me = g_at.rank, size = g_at.size;
  constexpr int64_t kCount = 16;
  for (DataType dtype : {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kAverage}) {
      const std::string name = std::string("wrap.") + DataTypeName(dtype) + "." + ReduceOpName(op);
      OpPtr p = SubmitBytesOnGpu(kEnqueue, g_at, name, dtype, {kCount},
                                 EncodeInts(dtype, OverflowTestInts(dtype, me, kCount)),
                                 GpuRequest{CollectiveKind::kAllreduce, op});
      const Status s = WaitFor(p, 30.0);
      ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
      const std::vector<int64_t> want = ExpectedIntAllreduceOf(
          dtype, op, size, kCount, [dtype](int r, int64_t i) { return OverflowTestInt(dtype, r, i); });
      EXPECT_TRUE(p->IntResult() == want) << name;
    }
  }
}

void CUDART_CB SleepThreeSeconds(void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); }

// Every rank's producer is busy for 3 s before it writes the input, with a peer timeout of
// 2 s: the collective waits for its own rank's GPU without counting it, and succeeds.
TFRING_TEST(NcclGlobal, ProducerBusierThanThePeerTimeoutIsNotAFailure) {
  OpPtr before = SubmitOnGpu(kEnqueue, g_at, "lag.before", DataType::kFloat32, {4},
                             TestValues(DataType::kFloat32, g_at.rank, 4), GpuRequest{});
  ExpectAllreduced(before, ReduceOp::kSum, g_at.size, 0);  // the NCCL world exists
  RestartRuntime(2);
  OpPtr warm = SubmitOnGpu(kEnqueue, g_at, "lag.warmup", DataType::kFloat32, {4},
                           TestValues(DataType::kFloat32, g_at.rank, 4), GpuRequest{});
  ExpectAllreduced(warm, ReduceOp::kSum, g_at.size, 0);
  // The same members after a restart: the last runtime's NCCL world is kept as it is.
  EXPECT_EQ(KeptWorld::LastMade(), ReshapeOff() ? "made anew" : "kept");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(cudaLaunchHostFunc(g_at.producer, SleepThreeSeconds, nullptr) == cudaSuccess);
  OpPtr late = SubmitOnGpu(kEnqueue, g_at, "lag.after", DataType::kFloat32, {1024},
                           TestValues(DataType::kFloat32, g_at.rank, 1024, 1), GpuRequest{});
  const Status s = WaitFor(late, 30.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(seconds, 2.9) << "the producer's lag did not happen";
  if (s.ok()) ExpectAllreduced(late, ReduceOp::kSum, g_at.size, 1);
  RestartRuntime(30);
}

// The last rank cannot allocate an allgather's output, after every rank agreed to run it:
// every rank fails that op within seconds (the peer timeout is 30 s) with the failing rank's
// reason, later GPU ops fail at once, and host collectives go on.
TFRING_TEST(NcclGlobal, AnErrorOnOneRankAfterAgreeingFailsEveryRankAtOnce) {
  const int me = g_at.rank, size = g_at.size, failing = size - 1;
  OpPtr warm = SubmitOnGpu(kEnqueue, g_at, "alloc.warmup", DataType::kFloat32, {4},
                           TestValues(DataType::kFloat32, me, 4), GpuRequest{});
  ExpectAllreduced(warm, ReduceOp::kSum, size, 0);
  GpuRequest gather{CollectiveKind::kAllgather};
  gather.fail_allocation = me == failing;
  const auto start = std::chrono::steady_clock::now();
  OpPtr op = SubmitOnGpu(kEnqueue, g_at, "alloc.gather", DataType::kFloat32, {me + 1, 2},
                         TestValues(DataType::kFloat32, me, (me + 1) * 2), gather);
  const Status s = WaitFor(op, 60.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(seconds, 10.0) << "failed only after " << seconds << " s: " << s.ToString();
  EXPECT_CONTAINS(s.message(), kInjectedAllocationFailure);
  EXPECT_CONTAINS(s.message(), "(on rank " + std::to_string(failing) + ")");
  OpPtr after = SubmitOnGpu(kEnqueue, g_at, "alloc.after", DataType::kFloat32, {4},
                            TestValues(DataType::kFloat32, me, 4), GpuRequest{});
  const Status later = WaitFor(after, 30.0);
  EXPECT_FALSE(later.ok());
  EXPECT_CONTAINS(later.message(), "GPU collectives fail from now on");
  OpPtr host = SubmitAllreduce(kEnqueue, "alloc.host", DataType::kFloat32, {6},
                               TestValues(DataType::kFloat32, me, 6, 3), ReduceOp::kSum);
  ExpectAllreduced(host, ReduceOp::kSum, size, 3);
  RestartRuntime(30);  // a new runtime makes new communicators
  OpPtr again = SubmitOnGpu(kEnqueue, g_at, "alloc.again", DataType::kFloat32, {4},
                            TestValues(DataType::kFloat32, me, 4, 4), GpuRequest{});
  ExpectAllreduced(again, ReduceOp::kSum, size, 4);
  // The failed world was revoked (or aborted): never kept as it is, whatever the members.
  EXPECT_EQ(KeptWorld::LastMade(), "made anew");
}

// The host GPU's test control (tests/cpp/host_gpu/host_gpu.h): the next call of a name that
// tfring's thread makes fails, once. Null on a real GPU: the tests that need it say so.
using FailNext = void (*)(const char* call, int error);
FailNext HostGpuFailNext() {
  const char* library = std::getenv("TFRING_NCCL_LIBRARY");
  void* handle = library != nullptr ? dlopen(library, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  return handle != nullptr ? reinterpret_cast<FailNext>(dlsym(handle, "tfring_host_gpu_fail_next"))
                           : nullptr;
}

// docs/gpu.md, 'Failures': an error on one rank once the ranks agreed to run a GPU
// collective fails that op on every rank "within milliseconds" (a second here, for a loaded
// machine), with that rank's reason. Then the runtime is started again, healthy.
void ExpectEveryRankFailsAtOnce(const OpPtr& op, std::chrono::steady_clock::time_point start,
                                int failing, const std::string& reason) {
  const Status s = WaitFor(op, 60.0);
  const double seconds = SecondsSince(start);
  std::printf("rank %d: failed after %.3f s: %s\n", g_at.rank, seconds, s.ToString().c_str());
  EXPECT_FALSE(s.ok());
  EXPECT_LT(seconds, 1.0) << "failed only after " << seconds << " s: " << s.ToString();
  EXPECT_CONTAINS(s.message(), reason);
  EXPECT_CONTAINS(s.message(), "(on rank " + std::to_string(failing) + ")");
  RestartRuntime(30);
}

TFRING_TEST(NcclGlobal, ACudaErrorOnOneRankFailsEveryRankAtOnce) {
  const FailNext fail_next = HostGpuFailNext();
  if (fail_next == nullptr) return;  // a real GPU: no way to make CUDA fail on demand
  const int me = g_at.rank, failing = g_at.size - 1;
  // The executor's wait for the op's producer: tfring's first CUDA call for it.
  if (me == failing) fail_next("cudaStreamWaitEvent", cudaErrorLaunchFailure);
  const auto start = std::chrono::steady_clock::now();
  OpPtr op = SubmitOnGpu(kEnqueue, g_at, "fail.cuda", DataType::kFloat32, {8},
                         TestValues(DataType::kFloat32, me, 8), GpuRequest{});
  ExpectEveryRankFailsAtOnce(op, start, failing, "cudaStreamWaitEvent");
  fail_next("cudaStreamWaitEvent", 0);  // disarmed, had tfring not made the call
}

TFRING_TEST(NcclGlobal, NcclsUniqueIdThatCannotBeMadeFailsEveryMemberAtOnce) {
  const FailNext fail_next = HostGpuFailNext();
  if (fail_next == nullptr || g_at.size < 2) return;
  const int me = g_at.rank;
  const std::vector<int32_t> members = {0, 1};  // a set of its own: a new communicator
  if (me == 0) fail_next("ncclGetUniqueId", ncclSystemError);
  const auto start = std::chrono::steady_clock::now();
  if (me <= 1) {
    OpPtr op = SubmitOnGpu(InSet(members), g_at, "fail.unique_id", DataType::kFloat32, {4},
                           TestValues(DataType::kFloat32, me, 4), GpuRequest{});
    const Status s = WaitFor(op, 60.0);
    const double seconds = SecondsSince(start);
    std::printf("rank %d: failed after %.3f s: %s\n", me, seconds, s.ToString().c_str());
    EXPECT_FALSE(s.ok());
    EXPECT_LT(seconds, 1.0) << "failed only after " << seconds << " s: " << s.ToString();
    EXPECT_CONTAINS(s.message(), "could not make NCCL's unique id");
  }
  fail_next("ncclGetUniqueId", 0);
  RestartRuntime(30);
}

TFRING_TEST(NcclGlobal, ATensorOnAnotherGpuOnOneRankFailsEveryRankAtOnce) {
  if (HostGpuFailNext() == nullptr) return;  // a second GPU, made up on the host GPU
  const int me = g_at.rank, failing = g_at.size - 1;
  // The communicators are made on the GPU of the first tensor: one on the usual GPU first.
  OpPtr warm = SubmitOnGpu(kEnqueue, g_at, "other_gpu.warmup", DataType::kFloat32, {4},
                           TestValues(DataType::kFloat32, me, 4), GpuRequest{});
  ExpectAllreduced(warm, ReduceOp::kSum, g_at.size, 0);
  setenv("TFRING_HOST_GPU_COUNT", "2", 1);
  GpuPlace at = g_at;
  if (me == failing) at.device = g_at.device + 1;
  const auto start = std::chrono::steady_clock::now();
  OpPtr op = SubmitOnGpu(kEnqueue, at, "fail.other_gpu", DataType::kFloat32, {8},
                         TestValues(DataType::kFloat32, me, 8), GpuRequest{});
  ExpectEveryRankFailsAtOnce(op, start, failing, "GPU " + std::to_string(g_at.device + 1));
  cudaSetDevice(g_at.device);
  unsetenv("TFRING_HOST_GPU_COUNT");
}

}  // namespace
}  // namespace testing
}  // namespace tfring
