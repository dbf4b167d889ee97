// The flight recorder's ring (core/flight_recorder.h): bounded at its capacity however many
// collectives pass, oldest first, each record's times and status as the entry went, and a
// record the ring reused never touched by the entry it was made for.
#include <chrono>
#include <string>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/flight_recorder.h"

namespace tfring {
namespace {

Request Named(const std::string& name) {
  Request r;
  r.name = name;
  r.shape = {4, 2};
  return r;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TFRING_TEST(FlightRecorder, TheRingHoldsItsCapacityOldestFirst) {
  FlightRecorder recorder(8);
  uint64_t last = 0;
  for (int i = 0; i < 10000; ++i) {
    last = recorder.Submitted(Named("t" + std::to_string(i)), FlightRecorder::Clock::now());
    recorder.Finished(last, Status::OK());
  }
  const std::string json = recorder.JsonMembers();
  EXPECT_EQ(Count(json, "\"seq\": "), 8) << json;
  EXPECT_TRUE(json.find("\"t9991\"") == std::string::npos) << json;
  EXPECT_TRUE(json.find("\"t9992\"") < json.find("\"t9999\"")) << json;
  EXPECT_EQ(last, 10000u);
}

TFRING_TEST(FlightRecorder, EachRecordFollowsItsEntry) {
  FlightRecorder recorder(4);
  const auto t = FlightRecorder::Clock::now();
  const uint64_t done = recorder.Submitted(Named("done"), t);
  const uint64_t failed = recorder.Submitted(Named("failed"), t);
  const uint64_t waiting = recorder.Submitted(Named("waiting"), t);
  for (uint64_t seq : {done, failed, waiting}) recorder.Taken(seq, t);
  recorder.Agreed(done, t);
  recorder.Started(done, t);
  recorder.Finished(done, Status::OK());
  recorder.Finished(failed, Status::Aborted("a peer is gone"));
  recorder.CycleRan();
  const std::string json = recorder.JsonMembers();
  EXPECT_EQ(Count(json, "\"status\": \"ok\""), 1) << json;
  EXPECT_EQ(Count(json, "\"status\": \"a peer is gone\""), 1) << json;
  EXPECT_EQ(Count(json, "\"status\": \"pending\""), 1) << json;
  // The waiting one was taken, never agreed, started or finished.
  const std::string rest = json.substr(json.find("\"waiting\""));
  EXPECT_EQ(Count(rest, "null"), 3) << rest;
  EXPECT_TRUE(json.find("\"cycles\": 1") != std::string::npos) << json;
  EXPECT_TRUE(json.find("\"shape\": [4, 2]") != std::string::npos) << json;
}

TFRING_TEST(FlightRecorder, AReusedRecordIsNotTouchedByItsOldEntry) {
  FlightRecorder recorder(2);
  const auto t = FlightRecorder::Clock::now();
  const uint64_t old = recorder.Submitted(Named("old"), t);
  recorder.Submitted(Named("b"), t);
  const uint64_t reused = recorder.Submitted(Named("c"), t);  // in old's place
  recorder.Finished(old, Status::Aborted("late"));
  const std::string json = recorder.JsonMembers();
  EXPECT_TRUE(json.find("\"old\"") == std::string::npos) << json;
  EXPECT_EQ(Count(json, "\"status\": \"pending\""), 2) << json;
  EXPECT_TRUE(reused > old);
}

TFRING_TEST(FlightRecorder, CapacityZeroRecordsNothing) {
  FlightRecorder recorder(0);
  EXPECT_FALSE(recorder.on());
  EXPECT_EQ(recorder.Submitted(Named("x"), FlightRecorder::Clock::now()), 0u);
  EXPECT_EQ(Count(recorder.JsonMembers(), "\"seq\""), 0);
}

}  // namespace
}  // namespace tfring
