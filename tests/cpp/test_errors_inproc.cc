// The coordinator's errors, with ranks as threads (inproc_job.h), at sizes 2 and 3: ranks
// that disagree about a tensor, a name submitted twice, stalls, shutdown with ops pending,
// a backend that fails. Each error must reach every rank involved, within seconds, and
// name the tensor, the problem and the ranks; the job must go on where it can.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

constexpr int kSizes[] = {2, 3};

TFRING_TEST(ErrorsInproc, MismatchesFailOnEveryRank) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    const int odd = size - 1;  // the rank that disagrees
    const std::string r = std::to_string(odd);
    job.OnEveryRank([&](int rank) {
      Coordinator* c = job.rank(rank);
      OpPtr shape = SubmitAllreduce(c, "x", DataType::kFloat32, {rank == odd ? 3 : 2},
                                    TestValues(DataType::kFloat32, rank, rank == odd ? 3 : 2),
                                    ReduceOp::kSum);
      const DataType dt = rank == odd ? DataType::kFloat64 : DataType::kFloat32;
      OpPtr dtype = SubmitAllreduce(c, "y", dt, {2}, TestValues(dt, rank, 2), ReduceOp::kSum);
      OpPtr root = SubmitBroadcast(c, "b", DataType::kInt32, {2},
                                   TestValues(DataType::kInt32, rank, 2), rank == odd ? 1 : 0);
      ExpectFailure(shape, StatusCode::kFailedPrecondition,
                    "Mismatched shapes for tensor 'x': rank 0 sent [2], rank " + r + " sent [3]");
      ExpectFailure(dtype, StatusCode::kFailedPrecondition,
                    "Mismatched data types for tensor 'y': rank 0 sent float32, rank " + r +
                        " sent float64");
      ExpectFailure(root, StatusCode::kFailedPrecondition,
                    "Mismatched root ranks for tensor 'b': rank 0 sent root_rank=0, rank " + r +
                        " sent root_rank=1");
      // The job goes on: a good op after the failures works.
      OpPtr good = SubmitAllreduce(c, "x", DataType::kFloat32, {2},
                                   TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum);
      ExpectAllreduced(good, ReduceOp::kSum, size, 0);
    });
  }
}

OpPtr SubmitDup(InprocJob* job, int rank) {
  return SubmitAllreduce(job->rank(rank), "dup", DataType::kFloat32, {3},
                         TestValues(DataType::kFloat32, rank, 3), ReduceOp::kSum);
}

// Rank 0 submits "dup" twice before any peer submits it, so the first cannot have finished
// when the second arrives: the second is refused, the first completes with the peers'.
void SecondDupIsRefused(InprocJob* job) {
  OpPtr first = SubmitDup(job, 0);
  OpPtr second = SubmitDup(job, 0);
  ExpectFailure(second, StatusCode::kInvalidArgument, "'dup' is already in flight on rank 0");
  job->OnEveryRank([&](int rank) {
    if (rank != 0) ExpectAllreduced(SubmitDup(job, rank), ReduceOp::kSum, job->size(), 0);
  });
  ExpectAllreduced(first, ReduceOp::kSum, job->size(), 0);
}

TFRING_TEST(ErrorsInproc, DuplicateNameInFlightFails) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    SecondDupIsRefused(&job);
  }
}

TFRING_TEST(ErrorsInproc, DuplicateOfACachedNameInFlightFails) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      ExpectAllreduced(SubmitDup(&job, rank), ReduceOp::kSum, size, 0);
    });
    // 'dup' is cached now: rank 0's next one waits on its cache slot (held there, not by
    // name), and a second one of the same name must still be refused.
    const int64_t rounds_before = job.negotiation_rounds(0);
    SecondDupIsRefused(&job);
    EXPECT_EQ(job.negotiation_rounds(0), rounds_before) << "the first ran from the cache";
  }
}

TFRING_TEST(ErrorsInproc, StallShutdownNamesMissingRanks) {
  for (int size : kSizes) {
    Options o = TestOptions();
    o.stall_shutdown_time_seconds = 1;
    InprocJob job(size, o);
    // Every rank but rank 1 submits 'lonely'.
    std::vector<OpPtr> ops(size);
    for (int r = 0; r < size; ++r) {
      if (r == 1) continue;
      ops[r] = SubmitAllreduce(job.rank(r), "lonely", DataType::kFloat32, {2},
                               TestValues(DataType::kFloat32, r, 2), ReduceOp::kSum);
    }
    const auto start = std::chrono::steady_clock::now();
    ExpectFailure(ops[0], StatusCode::kAborted, "'lonely' (submitted by ranks [0");
    ExpectFailure(ops[0], StatusCode::kAborted, "missing on ranks [1]");
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(waited, 5.0) << "the stall took too long to be reported";
    for (int r = 2; r < size; ++r) ExpectFailure(ops[r], StatusCode::kAborted, "'lonely'");
    // Every rank has stopped: a new op fails at once with the reason.
    for (int r = 0; r < size; ++r) {
      OpPtr late = SubmitAllreduce(job.rank(r), "late", DataType::kFloat32, {1}, {1.0},
                                   ReduceOp::kSum);
      ExpectFailure(late, StatusCode::kAborted, "stalled");
    }
  }
}

TFRING_TEST(ErrorsInproc, StallOfACachedTensorNamesMissingRanks) {
  for (int size : kSizes) {
    Options o = TestOptions();
    o.stall_shutdown_time_seconds = 1;
    InprocJob job(size, o);
    job.OnEveryRank([&](int rank) {
      OpPtr p = SubmitAllreduce(job.rank(rank), "w", DataType::kFloat32, {2},
                                TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum);
      ExpectAllreduced(p, ReduceOp::kSum, size, 0);
    });
    // 'w' is cached now. Rank 1 does not submit it again: rank 0's entry waits on its cache
    // bit, gives up the slot after a second, and is then reported by the stall inspector.
    OpPtr p = SubmitAllreduce(job.rank(0), "w", DataType::kFloat32, {2},
                              TestValues(DataType::kFloat32, 0, 2), ReduceOp::kSum);
    ExpectFailure(p, StatusCode::kAborted, "missing on ranks [1");
    EXPECT_CONTAINS(WaitFor(p).message(), "'w' (submitted by ranks [0]");
  }
}

TFRING_TEST(ErrorsInproc, ShutdownFailsOnlyPendingOps) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    std::vector<OpPtr> completed(size);
    job.OnEveryRank([&](int rank) {
      completed[rank] = SubmitAllreduce(job.rank(rank), "before", DataType::kFloat32, {2},
                                        TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum);
      ExpectAllreduced(completed[rank], ReduceOp::kSum, size, 0);
    });
    // Pending on rank 0 only: its peers never submit it.
    OpPtr pending = SubmitAllreduce(job.rank(0), "pending", DataType::kFloat32, {2},
                                    TestValues(DataType::kFloat32, 0, 2), ReduceOp::kSum);
    const auto start = std::chrono::steady_clock::now();
    job.Shutdown();  // returns only once every coordinator thread has ended
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
    ExpectFailure(pending, StatusCode::kAborted, "shut down");
    for (int r = 0; r < size; ++r) EXPECT_TRUE(WaitFor(completed[r], 0).ok());
    // After Shutdown, Enqueue calls done at once, with an error.
    for (int r = 0; r < size; ++r) {
      OpPtr late = SubmitAllreduce(job.rank(r), "after", DataType::kFloat32, {1}, {1.0},
                                   ReduceOp::kSum);
      ASSERT_TRUE(late->status.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
      EXPECT_FALSE(late->status.get().ok());
    }
    job.Shutdown();  // idempotent
  }
}

// A backend whose allreduce fails on every rank, with a message that names neither tensor
// nor rank (as MPI's and NCCL's errors do not).
class FailingAllreduceBackend : public Backend {
 public:
  explicit FailingAllreduceBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return "failing"; }
  Status Allreduce(const void*, void*, int64_t, DataType, ReduceOp) override {
    return Status::Internal("MPI_Allreduce failed on the wire");
  }
  Status Allgather(const void* in, void* out, const std::vector<int64_t>& bytes) override {
    return inner_->Allgather(in, out, bytes);
  }
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override {
    return inner_->Reducescatter(in, out, counts, dtype, op);
  }
  Status Alltoall(const void* in, const std::vector<int64_t>& send, void* out,
                  const std::vector<int64_t>& recv) override {
    return inner_->Alltoall(in, send, out, recv);
  }
  Status Broadcast(void* buffer, int64_t bytes, int root) override {
    return inner_->Broadcast(buffer, bytes, root);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

TFRING_TEST(ErrorsInproc, BackendFailureNamesTheTensorsAndTheRank) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions(), [](std::unique_ptr<Backend> inner, int) {
      return std::unique_ptr<Backend>(new FailingAllreduceBackend(std::move(inner)));
    });
    job.OnEveryRank([&](int rank) {
      OpPtr lone = SubmitAllreduce(job.rank(rank), "grad/lone", DataType::kFloat32, {2},
                                   TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum);
      ExpectFailure(lone, StatusCode::kInternal,
                    "allreduce of 'grad/lone' failed on rank " + std::to_string(rank) +
                        ": MPI_Allreduce failed on the wire");
    });
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
