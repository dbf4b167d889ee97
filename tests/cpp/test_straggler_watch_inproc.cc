// The straggler report (core/straggler_tally.h, core/straggler_watch.h): rank 0's arithmetic
// on made-up windows (who was late, by how much, in which collective; every step, once, or
// nobody), the windows' encoding, and a job of 3 ranks as threads where one submits late
// every time and the report, the same on every rank, names it.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/straggler_tally.h"
#include "tfring/kernels/core/straggler_watch.h"

namespace tfring {
namespace testing {
namespace {

// One window of `cycles` cycles from `first`, in which each rank waited waits_ms[rank] in
// every cycle, in `collective`.
std::vector<WaitWindow> Windows(int64_t first, int cycles, const std::vector<double>& waits_ms,
                                const std::string& collective = "grad") {
  std::vector<WaitWindow> out(waits_ms.size());
  for (size_t r = 0; r < waits_ms.size(); ++r) {
    for (int c = 0; c < cycles; ++c) {
      out[r].cycles.push_back({first + c, static_cast<int64_t>(waits_ms[r] * 1000), collective,
                               1000 * (first + c)});
    }
  }
  return out;
}

TFRING_TEST(StragglerTally, ARankLateEveryCycleIsNamedEveryStep) {
  StragglerTally tally(3);
  for (int w = 0; w < 3; ++w) {
    // Ranks 0 and 2 wait 50 ms for rank 1 in each of 20 cycles a window.
    const auto last_ins = tally.Add(Windows(20 * w, 20, {50, 0.2, 49}), 1.0, w + 1.0);
    EXPECT_EQ(last_ins.size(), 20u);
    EXPECT_EQ(last_ins[0].rank, 1);
  }
  const std::string json = tally.Json();
  EXPECT_CONTAINS(json, "\"stragglers\": [{\"rank\": 1, \"kind\": \"every_step\", "
                        "\"held_seconds\": 2.988");
  EXPECT_CONTAINS(json, "\"1\": {\"cycles\": 60, \"last_in\": 60, \"late_cycles\": 60, "
                        "\"held_seconds\": 2.988");
  EXPECT_CONTAINS(json, "\"by_collective\": {\"grad\": 2.988}");
  EXPECT_CONTAINS(json, "\"cycles_compared\": 60");
  // Rank 2 came in 1 ms after rank 0 each cycle, too little to be named or counted.
  EXPECT_CONTAINS(json, "\"2\": {\"cycles\": 60, \"last_in\": 0, \"late_cycles\": 60, "
                        "\"held_seconds\": 0.06,");
  EXPECT_CONTAINS(tally.Line(),
                  "straggler report over 3.000 s (60 cycles): rank 1 held the others up "
                  "2.988 s (100% of the time), slow every step: late in 60 of the 60 cycles of "
                  "'grad', 0.050 s each on average");
}

TFRING_TEST(StragglerTally, OneLongWaitIsNamedOnceWithWhereAndWhen) {
  StragglerTally tally(2);
  tally.Add(Windows(0, 30, {2, 1}), 1.0, 1.0);
  std::vector<WaitWindow> w = Windows(30, 30, {2, 1});
  w[0].cycles[7].wait_us = 1501000;  // rank 0 waited 1.5 s for rank 1 once
  w[0].cycles[7].collective = "checkpoint";
  tally.Add(w, 2.5, 3.5);
  const std::string json = tally.Json();
  EXPECT_CONTAINS(json, "\"stragglers\": [{\"rank\": 1, \"kind\": \"once\"");
  EXPECT_CONTAINS(json, "\"longest\": {\"seconds\": 1.5, \"collective\": \"checkpoint\", "
                        "\"at_seconds\": 3.5}");
  EXPECT_CONTAINS(tally.Line(), "straggler report over 3.500 s (60 cycles): rank 1 held the "
                                "others up 1.559 s (45% of the time), slow once: longest 1.500 s "
                                "in 'checkpoint' (3.500 s into the report)");
}

TFRING_TEST(StragglerTally, EvenRanksNameNobody) {
  StragglerTally tally(3);
  // Who comes last varies, and each rank holds the others up 5% of the time: noise.
  for (int w = 0; w < 4; ++w) {
    std::vector<WaitWindow> windows(3);
    for (int c = 0; c < 50; ++c) {
      for (int r = 0; r < 3; ++r) {
        const int64_t wait_us = ((c + r) % 3) * 1000;  // 0, 1 or 2 ms, in turn: 5%
        windows[r].cycles.push_back({50 * w + c, wait_us, "grad", 0});
      }
    }
    tally.Add(windows, 1.0, w + 1.0);
  }
  EXPECT_CONTAINS(tally.Json(), "\"stragglers\": []");
  EXPECT_CONTAINS(tally.Line(), "no rank holds the others back");
}

TFRING_TEST(StragglerTally, TwoSlowRanksAreBothNamedAndACycleOfOneIsNotCompared) {
  StragglerTally tally(4);
  std::vector<WaitWindow> w = Windows(0, 40, {30, 0, 1, 30});
  w[0].cycles.push_back({99, 5000000, "set", 0});  // only rank 0 had cycle 99: no comparison
  tally.Add(w, 2.0, 2.0);
  const std::string json = tally.Json();
  EXPECT_CONTAINS(json, "\"stragglers\": [{\"rank\": 1, \"kind\": \"every_step\"");
  EXPECT_CONTAINS(json, "{\"rank\": 2, \"kind\": \"every_step\"");
  EXPECT_CONTAINS(json, "\"cycles_compared\": 40");
  EXPECT_CONTAINS(json, "\"0\": {\"cycles\": 40, \"last_in\": 0, \"late_cycles\": 0, "
                        "\"held_seconds\": 0,");
}

TFRING_TEST(StragglerWatch, AWindowSurvivesItsEncodingAndDamageIsNamed) {
  WaitWindow w;
  w.cycles.push_back({3, 1234, "unnamed@train.py:12", 99});
  w.cycles.push_back({5, 0, "grad/w", 100});
  w.uncounted_cycles = 7;
  WaitWindow back;
  const std::string bytes = StragglerWatch::Encode(w);
  ASSERT_TRUE(StragglerWatch::Decode(bytes, 1, &back).ok());
  ASSERT_EQ(back.cycles.size(), 2u);
  EXPECT_EQ(back.cycles[0].collective, "unnamed@train.py:12");
  EXPECT_EQ(back.cycles[0].wait_us, 1234);
  EXPECT_EQ(back.cycles[1].cycle, 5);
  EXPECT_EQ(back.uncounted_cycles, 7);
  const Status cut = StragglerWatch::Decode(bytes.substr(0, bytes.size() - 3), 2, &back);
  EXPECT_CONTAINS(cut.message(), "window from rank 2 is damaged");
}

TFRING_TEST(StragglerWatchInproc, TheReportNamesTheRankThatSubmitsLateOnEveryRank) {
  Options options = TestOptions();
  options.straggler_window_seconds = 0.2;
  InprocJob job(3, options);
  job.OnEveryRank([&](int rank) {
    for (int i = 0; i < 30; ++i) {
      if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ExpectAllreduced(SubmitAllreduce(job.rank(rank), "step", DataType::kFloat32, {4},
                                       TestValues(DataType::kFloat32, rank, 4, 0),
                                       ReduceOp::kSum),
                       ReduceOp::kSum, 3, 0);
    }
  });
  // Each exchange happens in a cycle with work on rank 0; the 30 steps span several windows.
  const std::string report = job.rank(0)->StragglerReport();
  EXPECT_CONTAINS(report, "\"stragglers\": [{\"rank\": 2, \"kind\": \"every_step\"");
  EXPECT_CONTAINS(report, "rank 2 held the others up");
  EXPECT_CONTAINS(report, "cycles of 'step'");
  // The same report on every rank: rank 0 broadcast it.
  EXPECT_EQ(job.rank(1)->StragglerReport(), report);
  EXPECT_EQ(job.rank(2)->StragglerReport(), report);
}

}  // namespace
}  // namespace testing
}  // namespace tfring
