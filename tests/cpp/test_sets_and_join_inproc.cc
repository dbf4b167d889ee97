// Process sets and join() in the coordinator, with ranks as threads (inproc_job.h): the
// paths that otherwise run only under mpirun, here in one process, fast, and under the
// sanitizer builds too. Every rank computes the expected result itself.
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

// Enqueues into `c` with the entry's process set set to `members`.
EnqueueFn InSet(Coordinator* c, std::vector<int32_t> members) {
  return [c, members](Entry e) {
    e.request.key.set = members;
    c->Enqueue(std::move(e));
  };
}

std::vector<double> SumOver(const std::vector<int>& ranks, int64_t count, int salt) {
  std::vector<double> total(count, 0.0);
  for (int r : ranks) {
    const std::vector<double> v = TestValues(DataType::kFloat64, r, count, salt);
    for (int64_t i = 0; i < count; ++i) total[i] += v[i];
  }
  return total;
}

void ExpectResult(const OpPtr& op, const std::vector<double>& want) {
  const Status s = WaitFor(op);
  ASSERT_TRUE(s.ok()) << op->name << ": " << s.ToString();
  std::string why;
  EXPECT_TRUE(AllClose(DataType::kFloat64, op->Result(), want, &why)) << op->name << ": " << why;
}

TFRING_TEST(SetsInproc, SetCollectivesBesideGlobalOnes) {
  InprocJob job(3, TestOptions());
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    // Ranks 0 and 2 reduce in their set, twice (the second time from the response cache),
    // while every rank takes part in a global allreduce of the same name.
    for (int step = 0; step < 2; ++step) {
      OpPtr in_set;
      if (rank != 1) {
        in_set = SubmitAllreduce(InSet(c, {0, 2}), "x", DataType::kFloat64, {4},
                                 TestValues(DataType::kFloat64, rank, 4, step), ReduceOp::kSum);
      }
      OpPtr global = SubmitAllreduce(c, "x", DataType::kFloat64, {4},
                                     TestValues(DataType::kFloat64, rank, 4, 10 + step),
                                     ReduceOp::kSum);
      if (in_set) ExpectResult(in_set, SumOver({0, 2}, 4, step));
      ExpectResult(global, SumOver({0, 1, 2}, 4, 10 + step));
    }
  });
}

TFRING_TEST(SetsInproc, NonMemberIsRefused) {
  InprocJob job(3, TestOptions());
  OpPtr op = SubmitAllreduce(InSet(job.rank(1), {0, 2}), "not.mine", DataType::kFloat64, {1},
                             {1.0}, ReduceOp::kSum);
  ExpectFailure(op, StatusCode::kInvalidArgument, "not.mine");
}

TFRING_TEST(JoinInproc, JoinedRankContributesNothingAndAverageDividesByTheOthers) {
  InprocJob job(3, TestOptions());
  std::vector<int32_t> last(3, -1);
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    std::vector<OpPtr> joins;
    auto join = [&] {
      auto op = std::make_shared<Op>();
      op->name = "tfring.join";
      op->output.resize(sizeof(int32_t));
      Entry e;
      e.request.key.name = "tfring.join";
      e.request.kind = CollectiveKind::kJoin;
      e.request.dtype = DataType::kInt32;
      e.request.cacheable = false;
      e.output = op->output.data();
      e.done = [op](const Status& s) { op->promise.set_value(s); };
      c->Enqueue(std::move(e));
      return op;
    };
    if (rank == 2) {
      OpPtr j = join();  // out of data at once
      ASSERT_TRUE(WaitFor(j).ok());
      last[rank] = *reinterpret_cast<const int32_t*>(j->output.data());
      return;
    }
    OpPtr sum = SubmitAllreduce(c, "j.sum", DataType::kFloat64, {3},
                                TestValues(DataType::kFloat64, rank, 3, 1), ReduceOp::kSum);
    OpPtr avg = SubmitAllreduce(c, "j.avg", DataType::kFloat64, {3},
                                TestValues(DataType::kFloat64, rank, 3, 2), ReduceOp::kAverage);
    ExpectResult(sum, SumOver({0, 1}, 3, 1));  // rank 2 added the identity, zeros
    std::vector<double> mean = SumOver({0, 1}, 3, 2);
    for (double& x : mean) x /= 2;  // the ranks that had data, not all three
    ExpectResult(avg, mean);
    OpPtr j = join();
    ASSERT_TRUE(WaitFor(j).ok());
    last[rank] = *reinterpret_cast<const int32_t*>(j->output.data());
  });
  // Every join completes with the same last rank to join: one of ranks 0 and 1.
  EXPECT_EQ(last[0], last[1]);
  EXPECT_EQ(last[1], last[2]);
  EXPECT_TRUE(last[0] == 0 || last[0] == 1) << "last rank to join: " << last[0];
}

}  // namespace
}  // namespace testing
}  // namespace tfring
