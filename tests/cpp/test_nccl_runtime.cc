// The runtime's GPU path over real NCCL and raw device buffers: no TensorFlow needed, so it
// runs on a GPU machine that has only CUDA, NCCL and MPI. One rank per GPU:
//
//   mpirun -np <GPUs> build/tests/test_nccl_runtime
//
// A single GPU (np 1) still runs every code path: fusion, scaling, uneven allgather, the
// hierarchical allreduce, errors. Each input is written on a "producer" stream, as
// TensorFlow's kernels would write it, and handed over with an event (nccl_test_ops.h), so
// the tests also check that the executor waits for producers. Alltoall, process sets,
// integer wrap and the failures of the set-up are in test_nccl_global_runtime.cc. Without a usable GPU every test is skipped, with
// the reason (CI has no GPU; the suite reports the skip).
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/gpu_ranks.h"
#include "tests/cpp/nccl_job.h"
#include "tests/cpp/nccl_test_ops.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/cuda/batched_copy.h"
#include "tfring/kernels/backends/cuda/cuda_memory.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace testing {
namespace {


MpiContext g_mpi;
ProcessLayout g_layout;
int g_device = -1;
cudaStream_t g_producer = nullptr;
std::string g_skip;

void Die(const Status& s) { DieInSetup("test_nccl_runtime", s); }

std::unique_ptr<Coordinator> NewCoordinator(Options options) {
  return NewNcclCoordinator(g_mpi, g_layout, options);
}

std::unique_ptr<Coordinator> g_flat, g_hierarchical, g_staging;

class NcclEnvironment : public Environment {
 public:
  void SetUp() override {
    Status s = g_mpi.Initialize(WorldChoice(), &g_layout);
    if (!s.ok()) Die(s);
    SetLogRank(g_layout.rank);
    std::string skip = CudaUnavailableReason();
    int device = -1;
    if (skip.empty()) device = TestDevice(g_layout.local_rank, g_layout.local_size, &skip);
    // Every rank skips if any rank must.
    int mine = skip.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
      g_skip = skip.empty() ? "another rank has no usable GPU" : skip;
      return;
    }
    // NCCL checks that buffers are device memory only when asked (read once, at its first
    // use): the error test below relies on it.
    setenv("NCCL_CHECK_POINTERS", "1", 0);
    setenv("NCCL_CHECK_MODE", "DEBUG_LOCAL", 0);
    g_device = device;
    if (cudaSetDevice(g_device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&g_producer, cudaStreamNonBlocking) != cudaSuccess) {
      Die(Status::Internal("cannot use GPU " + std::to_string(g_device)));
    }
    Options flat;
    flat.peer_timeout_seconds = 20;
    g_flat = NewCoordinator(flat);
    Options hierarchical = flat;
    hierarchical.hierarchical_allreduce = true;
    g_hierarchical = NewCoordinator(hierarchical);
    g_staging = NewStagingCoordinator(g_mpi, g_layout, flat);
  }

  void TearDown() override {
    if (g_flat) g_flat->Shutdown();
    if (g_hierarchical) g_hierarchical->Shutdown();
    if (g_staging) g_staging->Shutdown();
    g_flat.reset();
    g_hierarchical.reset();
    g_staging.reset();
    g_mpi.Finalize();
  }

  std::string SkipReason() const override { return g_skip; }
  bool verbose() const override { return g_layout.rank == 0; }
  bool FailedAnywhere(bool failed_here) override {
    int mine = failed_here ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any != 0;
  }
};
TFRING_TEST_ENVIRONMENT(NcclEnvironment);

int Rank() { return g_layout.rank; }
int Size() { return g_layout.size; }

// Submits one collective on device buffers to `c` (nccl_test_ops.h).
OpPtr SubmitOnGpu(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                  const std::vector<double>& values, GpuRequest how) {
  return SubmitOnGpu([c](Entry e) { c->Enqueue(std::move(e)); },
                     GpuPlace{g_device, g_producer, Rank(), Size()}, name, dtype, shape, values,
                     how);
}

void AllreduceEveryDtypeAndOpOn(Coordinator* c) {
  int salt = 0;
  for (DataType dtype : kAllDtypes) {
    for (ReduceOp op : kAllOps) {
      const std::string name = std::string("ar/") + DataTypeName(dtype) + "/" + ReduceOpName(op);
      OpPtr p = SubmitOnGpu(c, name, dtype, {5, 3},
                            TestValues(dtype, Rank(), 15, salt), {CollectiveKind::kAllreduce, op});
      ExpectAllreduced(p, op, Size(), salt);
      ++salt;
    }
  }
}
TFRING_TEST(NcclRuntime, AllreduceEveryDtypeAndOp) { AllreduceEveryDtypeAndOpOn(g_flat.get()); }
TFRING_TEST(StagedThroughMpi, AllreduceEveryDtypeAndOp) { AllreduceEveryDtypeAndOpOn(g_staging.get()); }

TFRING_TEST(NcclRuntime, ScaleFactorsFoldedAndOnTheHostPath) {
  const std::vector<double> mine = TestValues(DataType::kFloat32, Rank(), 6, 1);
  // Sum with factors: one PreMulSum; Min with a negative prescale: the host round trip.
  GpuRequest sum{CollectiveKind::kAllreduce, ReduceOp::kSum, 0, 2.0, 0.25};
  GpuRequest min{CollectiveKind::kAllreduce, ReduceOp::kMin, 0, -1.0, 3.0};
  OpPtr a = SubmitOnGpu(g_flat.get(), "scaled/sum", DataType::kFloat32, {6}, mine, sum);
  OpPtr b = SubmitOnGpu(g_flat.get(), "scaled/min", DataType::kFloat64, {6},
                        TestValues(DataType::kFloat64, Rank(), 6, 1), min);
  for (const OpPtr& p : {a, b}) {
    const Status s = WaitFor(p);
    ASSERT_TRUE(s.ok()) << p->name << ": " << s.ToString();
  }
  std::vector<double> want_sum(6, 0.0), want_min(6, 1e300);
  for (int r = 0; r < Size(); ++r) {
    const auto v = TestValues(DataType::kFloat32, r, 6, 1);
    for (int i = 0; i < 6; ++i) {
      want_sum[i] += 2.0 * v[i] * 0.25;
      want_min[i] = std::min(want_min[i], -1.0 * v[i]);
    }
  }
  for (double& x : want_min) x *= 3.0;
  std::string why;
  EXPECT_TRUE(AllClose(DataType::kFloat32, a->Result(), want_sum, &why)) << why;
  EXPECT_TRUE(AllClose(DataType::kFloat64, b->Result(), want_min, &why)) << why;
}

void FusedSmallTensorsAndALargeOneOn(Coordinator* c) {
  std::vector<OpPtr> ops;
  for (int i = 0; i < 8; ++i) {
    ops.push_back(SubmitOnGpu(c, "fused/" + std::to_string(i), DataType::kFloat32,
                              {i + 1, 3}, TestValues(DataType::kFloat32, Rank(), (i + 1) * 3, i),
                              {CollectiveKind::kAllreduce, ReduceOp::kAverage}));
  }
  const int64_t n = 16 << 20;  // 64 MiB of float32: alone, input to output
  OpPtr large = SubmitOnGpu(c, "large", DataType::kFloat32, {n},
                            TestValues(DataType::kFloat32, Rank(), n, 9),
                            {CollectiveKind::kAllreduce, ReduceOp::kSum});
  for (int i = 0; i < 8; ++i) ExpectAllreduced(ops[i], ReduceOp::kAverage, Size(), i);
  ExpectAllreduced(large, ReduceOp::kSum, Size(), 9);
}
TFRING_TEST(NcclRuntime, FusedSmallTensorsAndALargeOne) { FusedSmallTensorsAndALargeOneOn(g_flat.get()); }
TFRING_TEST(StagedThroughMpi, FusedSmallTensorsAndALargeOne) { FusedSmallTensorsAndALargeOneOn(g_staging.get()); }

// More tensors than one batched-copy launch takes (64), of odd sizes, so that most sit at
// odd offsets in the fusion buffer.
TFRING_TEST(NcclRuntime, ManyFusedTensorsOfOddSizes) {
  std::vector<OpPtr> ops;
  for (int i = 0; i < 200; ++i) {
    const int64_t n = i % 7 + 1;
    ops.push_back(SubmitOnGpu(g_flat.get(), "many/" + std::to_string(i), DataType::kFloat16, {n},
                              TestValues(DataType::kFloat16, Rank(), n, i % 5),
                              {CollectiveKind::kAllreduce, ReduceOp::kSum}));
  }
  for (int i = 0; i < 200; ++i) ExpectAllreduced(ops[i], ReduceOp::kSum, Size(), i % 5);
}

void AllgatherUnevenFusedAndAloneOn(Coordinator* c) {
  const int r = Rank();
  GpuRequest gather{CollectiveKind::kAllgather};
  OpPtr a = SubmitOnGpu(c, "ag/a", DataType::kFloat64, {r + 1, 2},
                        TestValues(DataType::kFloat64, r, (r + 1) * 2, 1), gather);
  OpPtr b = SubmitOnGpu(c, "ag/b", DataType::kInt8, {2 * r + 1, 3},
                        TestValues(DataType::kInt8, r, (2 * r + 1) * 3, 2), gather);
  std::vector<double> want_a, want_b;
  for (int q = 0; q < Size(); ++q) {
    auto va = TestValues(DataType::kFloat64, q, (q + 1) * 2, 1);
    auto vb = TestValues(DataType::kInt8, q, (2 * q + 1) * 3, 2);
    want_a.insert(want_a.end(), va.begin(), va.end());
    want_b.insert(want_b.end(), vb.begin(), vb.end());
  }
  for (const OpPtr& p : {a, b}) {
    const Status s = WaitFor(p);
    ASSERT_TRUE(s.ok()) << p->name << ": " << s.ToString();
  }
  std::string why;
  EXPECT_TRUE(AllClose(DataType::kFloat64, a->Result(), want_a, &why)) << why;
  EXPECT_TRUE(AllClose(DataType::kInt8, b->Result(), want_b, &why)) << why;
  // Even sizes take ncclAllGather itself.
  OpPtr even = SubmitOnGpu(c, "ag/even", DataType::kInt32, {4},
                           TestValues(DataType::kInt32, r, 4, 3), gather);
  std::vector<double> want_even;
  for (int q = 0; q < Size(); ++q) {
    auto v = TestValues(DataType::kInt32, q, 4, 3);
    want_even.insert(want_even.end(), v.begin(), v.end());
  }
  ASSERT_TRUE(WaitFor(even).ok());
  EXPECT_TRUE(AllClose(DataType::kInt32, even->Result(), want_even, &why)) << why;
}
TFRING_TEST(NcclRuntime, AllgatherUnevenFusedAndAlone) { AllgatherUnevenFusedAndAloneOn(g_flat.get()); }
TFRING_TEST(StagedThroughMpi, AllgatherUnevenFusedAndAlone) { AllgatherUnevenFusedAndAloneOn(g_staging.get()); }

void BroadcastAloneAndFusedOn(Coordinator* c) {
  const int root = Size() - 1;
  GpuRequest bcast{CollectiveKind::kBroadcast, ReduceOp::kSum, root};
  std::vector<OpPtr> ops;
  ops.push_back(SubmitOnGpu(c, "bc/alone", DataType::kFloat32, {1000},
                            TestValues(DataType::kFloat32, Rank(), 1000, 0), bcast));
  ASSERT_TRUE(WaitFor(ops[0]).ok());
  for (int i = 1; i <= 3; ++i) {
    ops.push_back(SubmitOnGpu(c, "bc/" + std::to_string(i), DataType::kBFloat16,
                              {i, 2}, TestValues(DataType::kBFloat16, Rank(), i * 2, i), bcast));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const Status s = WaitFor(ops[i]);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const DataType dt = i == 0 ? DataType::kFloat32 : DataType::kBFloat16;
    const int64_t n = i == 0 ? 1000 : static_cast<int64_t>(i) * 2;
    std::string why;
    EXPECT_TRUE(AllClose(dt, ops[i]->Result(), TestValues(dt, root, n, static_cast<int>(i)), &why))
        << ops[i]->name << ": " << why;
  }
}
TFRING_TEST(NcclRuntime, BroadcastAloneAndFused) { BroadcastAloneAndFusedOn(g_flat.get()); }
TFRING_TEST(StagedThroughMpi, BroadcastAloneAndFused) { BroadcastAloneAndFusedOn(g_staging.get()); }

TFRING_TEST(NcclRuntime, HierarchicalAllreduceMatchesFlat) {
  int salt = 20;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    for (ReduceOp op : kAllOps) {
      std::vector<OpPtr> ops;  // one alone, and a fused pair
      for (int i = 0; i < 3; ++i) {
        const std::string name = std::string("hier/") + DataTypeName(dtype) + "/" +
                                 ReduceOpName(op) + "/" + std::to_string(i);
        ops.push_back(SubmitOnGpu(g_hierarchical.get(), name, dtype, {7},
                                  TestValues(dtype, Rank(), 7, salt + i),
                                  {CollectiveKind::kAllreduce, op}));
        if (i == 0) {
          ASSERT_TRUE(WaitFor(ops[0]).ok());
        }
      }
      for (int i = 0; i < 3; ++i) ExpectAllreduced(ops[i], op, Size(), salt + i);
      salt += 3;
    }
  }
}

void ReducescatterUnevenAndEvenOn(Coordinator* c) {
  for (int64_t rows : {int64_t{7}, int64_t{2} * Size()}) {  // uneven (grouped ncclReduce), even
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      const std::string name = "rs/" + std::to_string(rows) + "/" + ReduceOpName(op);
      OpPtr p = SubmitOnGpu(c, name, DataType::kFloat32, {rows, 2},
                            TestValues(DataType::kFloat32, Rank(), rows * 2, 7),
                            {CollectiveKind::kReducescatter, op});
      const Status s = WaitFor(p);
      ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
      const std::vector<int64_t> split = ReducescatterRows(rows, Size());
      int64_t start = 0;
      for (int r = 0; r < Rank(); ++r) start += split[r];
      const std::vector<double> all = ExpectedAllreduce(DataType::kFloat32, op, Size(), rows * 2, 7);
      const std::vector<double> want(all.begin() + start * 2,
                                     all.begin() + (start + split[Rank()]) * 2);
      std::string why;
      EXPECT_TRUE(AllClose(DataType::kFloat32, p->Result(), want, &why)) << name << ": " << why;
    }
  }
}
TFRING_TEST(NcclRuntime, ReducescatterUnevenAndEven) { ReducescatterUnevenAndEvenOn(g_flat.get()); }
TFRING_TEST(StagedThroughMpi, ReducescatterUnevenAndEven) { ReducescatterUnevenAndEvenOn(g_staging.get()); }

// Fusion buffers are packed and unpacked by a batched-copy kernel (backends/cuda). Copies of
// every size, at every alignment of source and destination, more than one launch's worth:
// each lands exactly where it should and nothing else is written; the fallback of one
// cudaMemcpyAsync per copy does the same.
TFRING_TEST(NcclRuntime, BatchedCopyEverySizeAndAlignment) {
  const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 15, 16, 17, 31, 33, 4096, 4098, 4100, 65537,
                           (1 << 20) + 3};
  const int copies_wanted = 150;  // three launches of at most 64
  std::vector<int64_t> bytes(copies_wanted), src_at(copies_wanted), dst_at(copies_wanted);
  int64_t src_total = 1, dst_total = 3;  // odd starts: misaligned from the first copy on
  for (int i = 0; i < copies_wanted; ++i) {
    bytes[i] = sizes[i % 16];
    src_at[i] = src_total;
    dst_at[i] = dst_total;
    src_total += bytes[i] + (i % 3);  // gaps of 0-2 bytes vary the alignment further
    dst_total += bytes[i] + (i % 5);
  }
  std::vector<unsigned char> src_host(src_total), expected(dst_total, 0xEE), got(dst_total);
  for (int i = 0; i < copies_wanted; ++i) {
    for (int64_t b = 0; b < bytes[i]; ++b) {
      const unsigned char v = static_cast<unsigned char>(i * 31 + b * 7);
      src_host[src_at[i] + b] = v;
      expected[dst_at[i] + b] = v;
    }
  }
  char* src = static_cast<char*>(DeviceAlloc(src_total));
  char* dst = static_cast<char*>(DeviceAlloc(dst_total));
  // Every step on the producer stream, the copier's: cudaMemcpy and cudaMemset run on the
  // legacy default stream, which does not order work on a non-blocking stream, so the
  // copies could read the source before it landed or be overwritten by the fill after.
  ASSERT_TRUE(cudaMemcpyAsync(src, src_host.data(), src_total, cudaMemcpyHostToDevice,
                              g_producer) == cudaSuccess);
  std::vector<DeviceCopy> copies;
  for (int i = 0; i < copies_wanted; ++i) copies.push_back({dst + dst_at[i], src + src_at[i], bytes[i]});
  for (bool use_kernel : {true, false}) {
    BatchedCopier copier;
    copier.Load(use_kernel);
    EXPECT_EQ(copier.kernel_loaded(), use_kernel);
    if (use_kernel && !copier.kernel_loaded()) {
      std::printf("batched-copy kernel not loaded: %s\n", copier.fallback_reason().c_str());
    }
    ASSERT_TRUE(cudaMemsetAsync(dst, 0xEE, dst_total, g_producer) == cudaSuccess);
    const Status s = copier.Copy(copies, g_producer);
    EXPECT_TRUE(s.ok());
    ASSERT_TRUE(cudaStreamSynchronize(g_producer) == cudaSuccess);
    ASSERT_TRUE(cudaMemcpy(got.data(), dst, dst_total, cudaMemcpyDeviceToHost) == cudaSuccess);
    int64_t wrong = 0, first_wrong = -1;
    for (int64_t b = 0; b < dst_total; ++b) {
      if (got[b] != expected[b] && wrong++ == 0) first_wrong = b;
    }
    EXPECT_EQ(wrong, 0);
    if (wrong) std::printf("kernel %d: first wrong byte at %lld\n", use_kernel, (long long)first_wrong);
  }
  cudaFree(src);
  cudaFree(dst);
}

// The failure tests make coordinators of their own: a failure aborts an executor's
// communicators for good.
//
// Rank `failing` passes host memory as its input: NCCL's pointer check (SetUp) rejects it
// before anything runs on the GPU, so that rank fails at once with NCCL's message, while its
// peers wait inside NCCL for its part. The peer timeout is long (30 s): only the failing
// rank's announcement can fail the op on the others within the few seconds checked here.
void ExpectOneRanksNcclErrorFailsEveryRank(bool hierarchical, int failing) {
  Options options;
  options.peer_timeout_seconds = 30;
  options.hierarchical_allreduce = hierarchical;
  std::unique_ptr<Coordinator> c = NewCoordinator(options);
  OpPtr warmup = SubmitOnGpu(c.get(), "warmup", DataType::kFloat32, {4},
                             TestValues(DataType::kFloat32, Rank(), 4), {});
  ASSERT_TRUE(WaitFor(warmup).ok());
  std::vector<float> host(1024, 1.0f);
  auto done = std::make_shared<std::promise<Status>>();
  auto status = done->get_future();
  void* device_out = DeviceAlloc(host.size() * sizeof(float));
  void* device_in = DeviceAlloc(host.size() * sizeof(float));
  Entry e;
  e.request.key.name = "bad";
  e.request.shape = {static_cast<int64_t>(host.size())};
  e.request.on_device = true;
  e.device = g_device;
  e.input = Rank() == failing ? static_cast<void*>(host.data()) : device_in;
  e.output = device_out;
  e.done = [done](const Status& s) { done->set_value(s); };
  const auto start = std::chrono::steady_clock::now();
  c->Enqueue(std::move(e));
  ASSERT_TRUE(status.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Status s = status.get();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(seconds, 10.0) << "the op failed only after " << seconds << " s: " << s.ToString();
  EXPECT_CONTAINS(s.message(), "GPU collectives fail from now on");
  // Every rank reports the failing rank's own reason: NCCL's, naming its call.
  EXPECT_CONTAINS(s.message(), hierarchical ? "ncclReduce" : "ncclAllReduce");
  EXPECT_CONTAINS(s.message(), "(on rank " + std::to_string(failing) + ")");
  if (Rank() != failing) {
    EXPECT_CONTAINS(s.message(), "failed on rank " + std::to_string(failing));
  }
  // Later GPU ops fail at once with the same reason instead of hanging.
  OpPtr after = SubmitOnGpu(c.get(), "after", DataType::kFloat32, {4},
                            TestValues(DataType::kFloat32, Rank(), 4), {});
  const Status later = WaitFor(after);
  EXPECT_FALSE(later.ok());
  EXPECT_CONTAINS(later.message(), "GPU collectives fail from now on");
  EXPECT_CONTAINS(later.message(), "(on rank " + std::to_string(failing) + ")");
  // Host collectives and the control plane go on: the job can save and exit cleanly.
  OpPtr host_op = SubmitAllreduce(c.get(), "host after", DataType::kFloat32, {6},
                                  TestValues(DataType::kFloat32, Rank(), 6, 3), ReduceOp::kSum);
  ExpectAllreduced(host_op, ReduceOp::kSum, Size(), 3);
  c->Shutdown();
  cudaFree(device_in);
  cudaFree(device_out);
}

TFRING_TEST(NcclRuntime, NcclErrorOnRankZeroFailsTheOpOnEveryRank) {
  ExpectOneRanksNcclErrorFailsEveryRank(false, 0);
}

TFRING_TEST(NcclRuntime, NcclErrorOnTheLastRankFailsTheOpOnEveryRank) {
  ExpectOneRanksNcclErrorFailsEveryRank(false, Size() - 1);
}

// With hosts of two ranks (at 4 ranks, TFRING_HOSTID by pairs: RANKS_PER_HOST=2
// tools/gpu_ranks.sh), the failing rank is the second host's first: the first host learns
// it in the step across hosts, and no host's first rank is left waiting in MPI for it.
TFRING_TEST(NcclRuntime, NcclErrorInAHierarchicalAllreduceFailsEveryHost) {
  ExpectOneRanksNcclErrorFailsEveryRank(true, Size() / 2);
}

// The failing rank is the first host's second: its host's first rank waits in the reduce
// inside the host, and must hear of the failure there, not in the copy to the host that
// follows (into pageable memory, it would wait for the reduce unwatched, for ever).
TFRING_TEST(NcclRuntime, NcclErrorOnAHostsSecondRankInAHierarchicalAllreduceFailsEveryHost) {
  if (Size() < 2) return;  // no second rank (every rank agrees: the size is the job's)
  ExpectOneRanksNcclErrorFailsEveryRank(true, 1);
}

}  // namespace
}  // namespace testing
}  // namespace tfring
