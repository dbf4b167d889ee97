// The autotuner's decisions, with a made-up clock and throughputs: it measures every
// candidate after the warm-up, picks the fastest, holds it, and logs each trial.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/autotuner.h"

namespace tfring {
namespace testing {
namespace {

Options TunerOptions() {
  Options o;
  o.autotune = true;
  o.autotune_sample_seconds = 1.0;
  o.autotune_warmup_samples = 1;
  o.autotune_samples_per_trial = 3;
  return o;
}

// Feeds one sample's worth of cycles at `bytes_per_second`.
void Sample(Autotuner* t, double* now, double bytes_per_second) {
  for (int i = 0; i < 4; ++i) {
    *now += 0.25;
    t->Record(static_cast<int64_t>(bytes_per_second * 0.25), *now);
  }
}

TFRING_TEST(Autotuner, TriesEveryCandidateThenHoldsTheFastest) {
  const std::vector<TunedParams> grid = {{1 << 20, 1.0}, {4 << 20, 1.0}, {16 << 20, 0.25}};
  const double speed[] = {100.0, 300.0, 200.0};
  Autotuner t(TunerOptions(), grid);
  const std::string log = "/tmp/tfring_test_autotune.csv";
  ASSERT_TRUE(t.OpenLog(log).ok());
  double now = 0;
  TunedParams p;
  ASSERT_TRUE(t.TakeChange(&p));
  EXPECT_TRUE(p == grid[0]);
  EXPECT_FALSE(t.TakeChange(&p));  // one change at a time
  t.Applied(now);
  Sample(&t, &now, 999.0);  // warm-up: ignored
  for (int trial = 0; trial < 3; ++trial) {
    for (int s = 0; s < 3; ++s) {
      EXPECT_FALSE(t.done());
      Sample(&t, &now, speed[trial] * (s == 1 ? 10 : 1));  // one outlier: the median ignores it
    }
    ASSERT_TRUE(t.TakeChange(&p));
    if (trial < 2) {
      EXPECT_TRUE(p == grid[trial + 1]);
      Sample(&t, &now, 1e9);  // not applied yet: not measured
      t.Applied(now);
    }
  }
  EXPECT_TRUE(t.done());
  EXPECT_TRUE(p == grid[1]) << p.fusion_threshold_bytes;
  EXPECT_TRUE(t.best() == grid[1]);
  t.Applied(now);
  Sample(&t, &now, 1.0);
  EXPECT_FALSE(t.TakeChange(&p));  // held for good
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_CONTAINS(text.str(), "trial,fusion_threshold_bytes,cycle_time_ms,samples,bytes_per_second,chosen\n");
  EXPECT_CONTAINS(text.str(), "0,1048576,1.000000,3,100.000000,0\n");
  EXPECT_CONTAINS(text.str(), "1,4194304,1.000000,3,300.000000,0\n");
  EXPECT_CONTAINS(text.str(), "2,16777216,0.250000,3,200.000000,0\n");
  EXPECT_CONTAINS(text.str(), "1,4194304,1.000000,3,300.000000,1\n");
  std::remove(log.c_str());
}

TFRING_TEST(Autotuner, ASampleNeedsTimeAndCycles) {
  Options o = TunerOptions();
  o.autotune_warmup_samples = 0;
  o.autotune_samples_per_trial = 1;
  Autotuner t(o, {{1, 1.0}, {2, 1.0}});
  TunedParams p;
  ASSERT_TRUE(t.TakeChange(&p));
  t.Applied(0);
  t.Record(100, 5.0);  // long enough, but one cycle
  t.Record(100, 5.1);
  EXPECT_FALSE(t.TakeChange(&p));
  t.Record(100, 5.2);  // the third cycle ends the sample, and the trial
  EXPECT_TRUE(t.TakeChange(&p));
  EXPECT_TRUE(p == TunedParams({2, 1.0}));
}

TFRING_TEST(Autotuner, UnwritableLogIsAnError) {
  Autotuner t(TunerOptions());
  const Status s = t.OpenLog("/nonexistent/dir/log.csv");
  EXPECT_FALSE(s.ok());
  EXPECT_CONTAINS(s.message(), "cannot write TFRING_AUTOTUNE_LOG='/nonexistent/dir/log.csv'");
  EXPECT_EQ(t.candidates().size(), 12u);  // the default grid
}

}  // namespace
}  // namespace testing
}  // namespace tfring
