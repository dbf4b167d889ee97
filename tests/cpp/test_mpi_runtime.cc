// The runtime over real MPI: one Coordinator per process over MpiControlPlane and
// MpiBackend, as the TF op library builds it. Run at several sizes:
//
//   mpirun -np 2 build/tests/test_mpi_runtime
//   mpirun -np 3 --oversubscribe build/tests/test_mpi_runtime
//
// Every rank checks its own results (each computes the expected global values itself).
// Rank 0 prints the per-test lines and "N passed, N failed"; other ranks print only their
// failures. A test counts as failed if it failed on any rank; every rank then exits non-zero.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_backend.h"
#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/mpi/mpi_control_plane.h"
#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace testing {
namespace {


MpiContext g_mpi;
ProcessLayout g_layout;
std::unique_ptr<Coordinator> g_coordinator;

void Die(const Status& s) {
  std::fprintf(stderr, "test_mpi_runtime: setup failed: %s\n", s.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// MPI around the whole run, and the one coordinator of this process (built as
// runtime/global_runtime.cc builds it).
class MpiEnvironment : public Environment {
 public:
  void SetUp() override {
    Status s = g_mpi.Initialize(WorldChoice(), &g_layout);
    if (!s.ok()) Die(s);
    SetLogRank(g_layout.rank);
    if (!g_mpi.threads_supported()) {
      Die(Status::FailedPrecondition("MPI does not provide MPI_THREAD_MULTIPLE"));
    }
    Options options;
    options.stall_check_time_seconds = 0;
    MPI_Comm control_comm, data_comm;
    if (!(s = g_mpi.DupWorld(&control_comm)).ok()) Die(s);
    if (!(s = g_mpi.DupWorld(&data_comm)).ok()) Die(s);
    auto backend = std::make_unique<MpiBackend>(data_comm);
    if (!(s = backend->Init()).ok()) Die(s);
    g_coordinator = std::make_unique<Coordinator>(
        options, std::make_unique<MpiControlPlane>(control_comm, options.peer_timeout_seconds),
        std::move(backend));
    g_coordinator->Start();
  }

  void TearDown() override {
    g_coordinator->Shutdown();
    g_coordinator.reset();  // frees the communicators before MPI is finalized
    g_mpi.Finalize();
  }

  bool verbose() const override { return g_layout.rank == 0; }

  bool FailedAnywhere(bool failed_here) override {
    int mine = failed_here ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any != 0;
  }
};
TFRING_TEST_ENVIRONMENT(MpiEnvironment);

int Rank() { return g_layout.rank; }
int Size() { return g_layout.size; }
Coordinator* C() { return g_coordinator.get(); }

TFRING_TEST(MpiRuntime, AllreduceEveryDtypeAndOp) {
  int salt = 0;
  for (DataType dtype : kHostDtypes) {
    for (ReduceOp op : kAllOps) {
      const std::string name = std::string("ar/") + DataTypeName(dtype) + "/" + ReduceOpName(op);
      OpPtr p = SubmitAllreduce(C(), name, dtype, {5, 3}, TestValues(dtype, Rank(), 15, salt), op);
      ExpectAllreduced(p, op, Size(), salt);
      ++salt;
    }
  }
}

// Integer sums and products that overflow wrap, as TensorFlow's do, whatever MPI's own ops
// would do (Open MPI 5's AVX component saturates 8- and 16-bit sums from 16 elements on):
// tensors long enough to take MPI's vectorized paths, one per op (each reduced alone),
// compared as integers (int64 exactly; tests/parallel/test_integer_wrap.py fuses them).
TFRING_TEST(MpiRuntime, IntegerOverflowWrapsLikeTensorFlow) {
  const int64_t n = 1000;
  for (DataType dtype : kHostDtypes) {
    if (IsFloatingPoint(dtype)) continue;
    std::vector<OpPtr> ops;
    for (ReduceOp op : kAllOps) {
      const std::string name = std::string("wrap/") + DataTypeName(dtype) + "/" + ReduceOpName(op);
      ops.push_back(SubmitAllreduceOfBytes([](Entry e) { C()->Enqueue(std::move(e)); }, name,
                                           dtype, {n},
                                           EncodeInts(dtype, OverflowTestInts(dtype, Rank(), n)),
                                           op));
    }
    for (size_t k = 0; k < ops.size(); ++k) {
      const ReduceOp op = kAllOps[k];
      ASSERT_TRUE(WaitFor(ops[k]).ok()) << ops[k]->name;
      const std::vector<int64_t> want = ExpectedIntAllreduceOf(
          dtype, op, Size(), n, [dtype](int r, int64_t i) { return OverflowTestInt(dtype, r, i); });
      const std::vector<int64_t> got = ops[k]->IntResult();
      const auto wrong = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
      EXPECT_TRUE(wrong.first == got.end())
          << ops[k]->name << ": element " << (wrong.first - got.begin()) << " is "
          << (wrong.first == got.end() ? 0 : *wrong.first) << ", want "
          << (wrong.second == want.end() ? 0 : *wrong.second);
    }
  }
}

TFRING_TEST(MpiRuntime, AllreduceLargeTensors) {
  const int64_t n = 1 << 20;
  OpPtr f32 = SubmitAllreduce(C(), "large/f32", DataType::kFloat32, {n},
                              TestValues(DataType::kFloat32, Rank(), n, 1), ReduceOp::kAverage);
  OpPtr f16 = SubmitAllreduce(C(), "large/f16", DataType::kFloat16, {n / 4},
                              TestValues(DataType::kFloat16, Rank(), n / 4, 2), ReduceOp::kSum);
  ExpectAllreduced(f32, ReduceOp::kAverage, Size(), 1);
  ExpectAllreduced(f16, ReduceOp::kSum, Size(), 2);
}

TFRING_TEST(MpiRuntime, AllgatherUneven) {
  // Rank r sends r+1 rows of a and 2r rows of b (none from rank 0): one fused call.
  const int r = Rank();
  OpPtr a = SubmitAllgather(C(), "ag/a", DataType::kFloat64, {r + 1, 2},
                            TestValues(DataType::kFloat64, r, (r + 1) * 2, 1));
  OpPtr b = SubmitAllgather(C(), "ag/b", DataType::kInt8, {2 * r, 3},
                            TestValues(DataType::kInt8, r, 2 * r * 3, 2));
  std::vector<double> want_a, want_b;
  int64_t rows_a = 0, rows_b = 0;
  for (int q = 0; q < Size(); ++q) {
    auto va = TestValues(DataType::kFloat64, q, (q + 1) * 2, 1);
    auto vb = TestValues(DataType::kInt8, q, 2 * q * 3, 2);
    want_a.insert(want_a.end(), va.begin(), va.end());
    want_b.insert(want_b.end(), vb.begin(), vb.end());
    rows_a += q + 1;
    rows_b += 2 * q;
  }
  for (const OpPtr& p : {a, b}) {
    const Status s = WaitFor(p);
    ASSERT_TRUE(s.ok()) << p->name << ": " << s.ToString();
  }
  EXPECT_TRUE(a->output_shape == Shape({rows_a, 2})) << ShapeToString(a->output_shape);
  EXPECT_TRUE(b->output_shape == Shape({rows_b, 3})) << ShapeToString(b->output_shape);
  std::string why;
  EXPECT_TRUE(AllClose(DataType::kFloat64, a->Result(), want_a, &why)) << why;
  EXPECT_TRUE(AllClose(DataType::kInt8, b->Result(), want_b, &why)) << why;
  // Alone (no fusion), and a second time with other sizes (allgather is never cached).
  for (int step = 0; step < 2; ++step) {
    const int rows = (r + step) % 3 + 1;
    OpPtr c = SubmitAllgather(C(), "ag/c", DataType::kFloat32, {rows},
                              TestValues(DataType::kFloat32, r, rows, step));
    std::vector<double> want;
    for (int q = 0; q < Size(); ++q) {
      auto v = TestValues(DataType::kFloat32, q, (q + step) % 3 + 1, step);
      want.insert(want.end(), v.begin(), v.end());
    }
    ASSERT_TRUE(WaitFor(c).ok());
    EXPECT_TRUE(AllClose(DataType::kFloat32, c->Result(), want, &why)) << why;
  }
}

TFRING_TEST(MpiRuntime, Broadcast) {
  for (int root : {Size() - 1, 0}) {
    std::vector<OpPtr> ops;  // one alone, then three together (fused)
    const std::string tag = "bc/root" + std::to_string(root) + "/";
    ops.push_back(SubmitBroadcast(C(), tag + "alone", DataType::kBFloat16, {6},
                                  TestValues(DataType::kBFloat16, Rank(), 6, 0), root));
    ASSERT_TRUE(WaitFor(ops[0]).ok());
    for (int i = 1; i <= 3; ++i) {
      ops.push_back(SubmitBroadcast(C(), tag + std::to_string(i), DataType::kInt64, {i, 2},
                                    TestValues(DataType::kInt64, Rank(), i * 2, i), root));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      const Status s = WaitFor(ops[i]);
      ASSERT_TRUE(s.ok()) << ops[i]->name << ": " << s.ToString();
      const int64_t n = static_cast<int64_t>(ops[i]->input.size() / DataTypeSize(ops[i]->dtype));
      EXPECT_TRUE(ops[i]->Result() == TestValues(ops[i]->dtype, root, n, static_cast<int>(i)))
          << ops[i]->name << " on rank " << Rank() << " does not hold root " << root << "'s values";
    }
  }
}

TFRING_TEST(MpiRuntime, FiftySmallTensorsFused) {
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                             DataType::kInt32};
  for (int step = 0; step < 3; ++step) {  // the later steps run from the response cache
    std::vector<OpPtr> ops;
    std::vector<ReduceOp> reduce;
    for (int i = 0; i < 50; ++i) {
      const DataType dtype = dtypes[i % 4];
      const ReduceOp op = i % 3 == 0 ? ReduceOp::kAverage : ReduceOp::kSum;
      ops.push_back(SubmitAllreduce(C(), "small/" + std::to_string(i), dtype, {i % 7 + 1},
                                    TestValues(dtype, Rank(), i % 7 + 1, i + step), op));
      reduce.push_back(op);
    }
    for (int i = 0; i < 50; ++i) ExpectAllreduced(ops[i], reduce[i], Size(), i + step);
  }
}

TFRING_TEST(MpiRuntime, OrderIndependence) {
  std::vector<int> order(20);
  for (int i = 0; i < 20; ++i) order[i] = i;
  if (Rank() % 2 == 1) std::reverse(order.begin(), order.end());
  else if (Rank() > 0) std::rotate(order.begin(), order.begin() + 7, order.end());
  std::vector<OpPtr> ops(20);
  for (int i : order) {
    const DataType dtype = i % 2 ? DataType::kInt64 : DataType::kFloat64;
    ops[i] = SubmitAllreduce(C(), "order/" + std::to_string(i), dtype, {i + 1},
                             TestValues(dtype, Rank(), i + 1, i), ReduceOp::kSum);
  }
  for (int i = 0; i < 20; ++i) ExpectAllreduced(ops[i], ReduceOp::kSum, Size(), i);
}

TFRING_TEST(MpiRuntime, ScalarsAndEmptyTensors) {
  OpPtr scalar = SubmitAllreduce(C(), "scalar", DataType::kFloat16, {},
                                 TestValues(DataType::kFloat16, Rank(), 1), ReduceOp::kSum);
  ExpectAllreduced(scalar, ReduceOp::kSum, Size(), 0);
  OpPtr empty = SubmitAllreduce(C(), "empty", DataType::kInt64, {0}, {}, ReduceOp::kSum);
  ExpectAllreduced(empty, ReduceOp::kSum, Size(), 0);
  OpPtr empty16 = SubmitAllreduce(C(), "empty16", DataType::kBFloat16, {0}, {}, ReduceOp::kMax);
  ExpectAllreduced(empty16, ReduceOp::kMax, Size(), 0);
  OpPtr bc = SubmitBroadcast(C(), "bc/empty", DataType::kFloat32, {0, 3}, {}, Size() - 1);
  EXPECT_TRUE(WaitFor(bc).ok());
  OpPtr ag = SubmitAllgather(C(), "ag/empty", DataType::kFloat32, {0, 3}, {});
  ASSERT_TRUE(WaitFor(ag).ok());
  EXPECT_TRUE(ag->output_shape == Shape({0, 3})) << ShapeToString(ag->output_shape);
}

TFRING_TEST(MpiRuntime, ShapeMismatchFailsOnEveryRank) {
  const int odd = Size() - 1;
  const int64_t n = Rank() == odd ? 3 : 2;
  OpPtr p = SubmitAllreduce(C(), "mismatch", DataType::kFloat32, {n},
                            TestValues(DataType::kFloat32, Rank(), n), ReduceOp::kSum);
  ExpectFailure(p, StatusCode::kFailedPrecondition,
                "Mismatched shapes for tensor 'mismatch': rank 0 sent [2], rank " +
                    std::to_string(odd) + " sent [3]");
  // The job goes on.
  OpPtr good = SubmitAllreduce(C(), "mismatch", DataType::kFloat32, {2},
                               TestValues(DataType::kFloat32, Rank(), 2), ReduceOp::kSum);
  ExpectAllreduced(good, ReduceOp::kSum, Size(), 0);
}

TFRING_TEST(MpiRuntime, MpiErrorsNameTheFunctionAndTheRank) {
  const Status s = MpiStatus(MPI_ERR_COMM, "MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out)",
                             "/src/tfring/kernels/backends/mpi/mpi_backend.cc", 42);
  EXPECT_TRUE(s.code() == StatusCode::kInternal);
  EXPECT_CONTAINS(s.message(), "MPI_Allreduce failed on rank " + std::to_string(Rank()) + ": ");
  EXPECT_CONTAINS(s.message(), "(mpi_backend.cc:42)");
  EXPECT_TRUE(s.message().find("MPI_IN_PLACE") == std::string::npos) << s.message();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(MPI_ERR_COMM, text, &len);
  EXPECT_CONTAINS(s.message(), std::string(text, len));
}

// The GPU path's failure notice (core/failure_notice.h): what one rank announces, every
// other rank hears, with its status code and reason, while it only polls; nothing is heard
// where nothing was announced, and only the first announcement counts.
TFRING_TEST(MpiRuntime, FailureNoticeReachesEveryPeer) {
  std::unique_ptr<MpiFailureNotice> notice;
  ASSERT_TRUE(MpiFailureNotice::Create(g_mpi.world(), &notice).ok());
  Status heard;
  int from = -1;
  EXPECT_FALSE(notice->Heard(&heard, &from));
  MPI_Barrier(g_mpi.world());
  EXPECT_FALSE(notice->Heard(&heard, &from)) << "heard " << heard.ToString() << " from " << from;
  MPI_Barrier(g_mpi.world());  // no rank announces before every rank has checked
  const int failing = Size() - 1;
  const std::string reason = std::string(5000, 'x') + " ncclAllReduce failed";  // cut to fit
  if (Rank() == failing) {
    notice->Announce(Status::Internal(reason));
    notice->Announce(Status::Aborted("a second failure"));  // ignored: the first one counts
    EXPECT_FALSE(notice->Heard(&heard, &from));  // a rank does not hear itself
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool got = false;
    while (!(got = notice->Heard(&heard, &from)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(got) << "rank " << failing << "'s announcement did not arrive in 10 s";
    EXPECT_EQ(from, failing);
    EXPECT_TRUE(heard.code() == StatusCode::kInternal) << heard.ToString();
    // The reason names the rank, then says what it announced (cut to one receive).
    const std::string prefix = "a GPU collective failed on rank " + std::to_string(failing) +
                               ", which told this rank why: ";
    EXPECT_TRUE(heard.message() == prefix + reason.substr(0, 4095)) << heard.message().substr(0, 200);
    // A rank that heard does not announce: its failure is the echo of the first.
    notice->Announce(Status::Aborted("echo"));
  }
  MPI_Barrier(g_mpi.world());
  if (Rank() != failing) {
    // Still the first announcement, whatever else was sent.
    ASSERT_TRUE(notice->Heard(&heard, &from));
    EXPECT_EQ(from, failing);
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
