// When the cycle starts on ops from a graph (coordinator.h): a lone graph op waits until no
// more have come for TFRING_BATCH_GAP_US, so that a step's tensors are fused, unless as
// many have come as in the largest recent burst; the tensors of one grouped op arrive
// together (Coordinator::EnqueueAll) and start at once, in one cycle. Ranks as threads, at
// sizes 2 and 3.
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

constexpr int kSizes[] = {2, 3};
// Long enough that "started at once" (under half the gap) keeps a second of margin for a
// busy machine's scheduling, while "waited for the gap" (at least 0.9 of it) cannot be
// reached by noise, which only ever adds time.
constexpr double kGapSeconds = 2.0;

// A batch gap far longer than any cycle, so that waiting for it shows.
Options LongGap() {
  Options o = TestOptions();
  o.batch_gap_us = kGapSeconds * 1e6;
  o.cycle_time_ms = kGapSeconds * 1e3;
  return o;
}

// Runs `body` for each size at once, each a job of its own: the tests wait on the batch gap,
// not on the CPU, so that sizes run in turn would only add up their waits.
void OnEverySize(const std::function<void(int)>& body) {
  std::vector<std::thread> jobs;
  for (int size : kSizes) jobs.emplace_back(body, size);
  for (std::thread& job : jobs) job.join();
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TFRING_TEST(BurstInproc, AGroupedOpStartsAtOnceWithAllItsTensors) {
  OnEverySize([](int size) {
    InprocJob job(size, LongGap());
    job.OnEveryRank([&](int rank) {
      std::vector<Entry> group;
      const EnqueueFn collect = [&group](Entry e) { group.push_back(std::move(e)); };
      std::vector<OpPtr> ops;
      for (int i = 0; i < 3; ++i) {
        ops.push_back(SubmitAllreduce(collect, "group." + std::to_string(i), DataType::kFloat32,
                                      {4}, TestValues(DataType::kFloat32, rank, 4, i),
                                      ReduceOp::kSum));
      }
      for (const Entry& e : group) EXPECT_FALSE(e.eager) << "a graph op's tensors";
      const auto start = std::chrono::steady_clock::now();
      job.rank(rank)->EnqueueAll(std::move(group));
      for (int i = 0; i < 3; ++i) ExpectAllreduced(ops[i], ReduceOp::kSum, size, i);
      EXPECT_TRUE(SecondsSince(start) < kGapSeconds / 2)
          << "the group waited for the batch gap: " << SecondsSince(start) << " s";
    });
  });
}

TFRING_TEST(BurstInproc, ALoneGraphOpWaitsForTheBurstToEnd) {
  OnEverySize([](int size) {
    InprocJob job(size, LongGap());
    job.OnEveryRank([&](int rank) {
      const auto start = std::chrono::steady_clock::now();
      OpPtr op = SubmitAllreduce(job.rank(rank), "lone", DataType::kFloat32, {4},
                                 TestValues(DataType::kFloat32, rank, 4), ReduceOp::kSum);
      EXPECT_TRUE(WaitFor(op, 4 * kGapSeconds).ok());
      ExpectAllreduced(op, ReduceOp::kSum, size, 0);
      EXPECT_TRUE(SecondsSince(start) >= kGapSeconds * 0.9)
          << "a graph op started before the burst could end: " << SecondsSince(start) << " s";
    });
  });
}

// Submits `count` graph ops (one tensor each) on `rank` and waits for them; the seconds
// from the first submission to the last result.
double TimedBurst(InprocJob* job, int rank, int size, int count, const std::string& prefix) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<OpPtr> ops;
  for (int i = 0; i < count; ++i) {
    ops.push_back(SubmitAllreduce(job->rank(rank), prefix + "." + std::to_string(i),
                                  DataType::kFloat32, {4},
                                  TestValues(DataType::kFloat32, rank, 4, i), ReduceOp::kSum));
  }
  for (int i = 0; i < count; ++i) {
    EXPECT_TRUE(WaitFor(ops[i], 4 * kGapSeconds).ok());
    ExpectAllreduced(ops[i], ReduceOp::kSum, size, i);
  }
  return SecondsSince(start);
}

TFRING_TEST(BurstInproc, ABurstAsLargeAsTheLastStartsWithoutTheGap) {
  OnEverySize([](int size) {
    InprocJob job(size, LongGap());
    job.OnEveryRank([&](int rank) {
      const double first = TimedBurst(&job, rank, size, 1, "step");
      EXPECT_TRUE(first >= kGapSeconds * 0.9)
          << "the first burst started before it could end: " << first << " s";
      // The same step again: its one op is the whole burst, as last time.
      const double again = TimedBurst(&job, rank, size, 1, "step");
      EXPECT_TRUE(again < kGapSeconds / 2)
          << "a burst as large as the last waited for the gap: " << again << " s";
    });
  });
}

TFRING_TEST(BurstInproc, ABurstSmallerThanARecentOneWaitsForTheGap) {
  OnEverySize([](int size) {
    InprocJob job(size, LongGap());
    job.OnEveryRank([&](int rank) {
      TimedBurst(&job, rank, size, 2, "step");
      const double smaller = TimedBurst(&job, rank, size, 1, "metric");
      EXPECT_TRUE(smaller >= kGapSeconds * 0.9)
          << "one op after a burst of two started without waiting: " << smaller << " s";
    });
  });
}

}  // namespace
}  // namespace testing
}  // namespace tfring
