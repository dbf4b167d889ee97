// The negotiator (core/negotiator.h) as the pure state machine it is: completion order,
// validation messages, stall reports.
#include <algorithm>
#include <chrono>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/negotiator.h"
#include "tfring/kernels/core/unnamed_names.h"

namespace tfring {
namespace {

const SteadyClock::time_point kT0 = SteadyClock::now();

SteadyClock::time_point At(double seconds) {
  return kT0 + std::chrono::duration_cast<SteadyClock::duration>(
                   std::chrono::duration<double>(seconds));
}

// An allreduce of `key` (made from a name when only that is given) in `set`, keyed as the
// coordinator keys it.
Request Allreduce(const TensorKey& key, Shape shape = {2, 3}, std::vector<int32_t> set = {}) {
  Request r;
  r.key = key;
  r.key.set = std::move(set);
  r.name = KeyString(r.key);
  r.shape = std::move(shape);
  return r;
}
Request Allreduce(const std::string& name, Shape shape = {2, 3}) {
  return Allreduce(NamedKey(name), std::move(shape));
}

std::vector<std::string> Names(const std::vector<Response>& rs) {
  std::vector<std::string> out;
  for (const Response& r : rs) out.push_back(r.name);
  return out;
}

// Runs `requests` (rank r's request is requests[r]) through a fresh negotiator.
Response NegotiateOne(const std::vector<Request>& requests) {
  Negotiator n(static_cast<int>(requests.size()));
  for (size_t r = 0; r < requests.size(); ++r) n.Add(static_cast<int>(r), requests[r], At(0));
  std::vector<Response> out = n.TakeReady();
  if (out.size() == 1) return out[0];
  Response none;
  none.name = "<none>";
  return none;
}

TFRING_TEST(Negotiator, ReleasesInCompletionOrder) {
  Negotiator n(3);
  // Rank 0 submits a, b; rank 1 submits b, a; rank 2 submits b first: b completes first.
  n.Add(0, Allreduce("a"), At(0));
  n.Add(0, Allreduce("b"), At(0));
  n.Add(1, Allreduce("b"), At(0));
  n.Add(1, Allreduce("a"), At(0));
  EXPECT_TRUE(n.TakeReady().empty());
  EXPECT_EQ(n.num_pending(), 2u);
  n.Add(2, Allreduce("b"), At(0));
  n.Add(2, Allreduce("a"), At(0));
  const auto ready = n.TakeReady();
  EXPECT_TRUE(Names(ready) == std::vector<std::string>({"b", "a"}));
  for (const Response& r : ready) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(n.num_pending(), 0u);
  EXPECT_TRUE(n.TakeReady().empty());
}

TFRING_TEST(Negotiator, ANameCanBeNegotiatedAgainAfterRelease) {
  Negotiator n(2);
  for (int step = 0; step < 3; ++step) {
    n.Add(1, Allreduce("w"), At(step));
    n.Add(0, Allreduce("w"), At(step));
    EXPECT_EQ(n.TakeReady().size(), 1u) << "step " << step;
  }
}

TFRING_TEST(Negotiator, ResponseCarriesTheRequest) {
  Request a = Allreduce("g");
  a.dtype = DataType::kFloat16;
  a.reduce_op = ReduceOp::kMax;
  Response r = NegotiateOne({a, a});
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.dtype == DataType::kFloat16 && r.reduce_op == ReduceOp::kMax);
  EXPECT_TRUE(r.cacheable);
  a.cacheable = false;
  Request b = a;
  b.cacheable = true;
  EXPECT_FALSE(NegotiateOne({b, a}).cacheable) << "one uncacheable rank makes it uncacheable";
}

TFRING_TEST(Negotiator, DriftedUnnamedCallsNameEachRanksCall) {
  // Unnamed eager calls pair by order: a mismatch between them says where each was made.
  Request a = Allreduce("unnamed.7");
  a.key.call_site = "train.py:52";
  Request b = Allreduce("unnamed.7", {4});
  b.key.call_site = "train.py:40";
  const Response r = NegotiateOne({a, b});
  EXPECT_CONTAINS(r.error, "Mismatched shapes for tensor 'unnamed.7'");
  EXPECT_CONTAINS(r.error, "Rank 0 made this call at train.py:52, rank 1 at train.py:40");
  EXPECT_CONTAINS(r.error, "drifted apart");
  // Different lines that agree pair (a rank-dependent branch): no error.
  b.shape = a.shape;
  EXPECT_TRUE(NegotiateOne({a, b}).ok());
  // Named ops carry no call site, and their messages say nothing of drift.
  Request c = Allreduce("w"), d = Allreduce("w", {4});
  EXPECT_FALSE(NegotiateOne({c, d}).error.find("drifted") != std::string::npos);
}

TFRING_TEST(Negotiator, StallWarningSaysWhatHappensNext) {
  EXPECT_CONTAINS(StallShutdownNote(600), "TFRING_STALL_SHUTDOWN_TIME_SECONDS=600 s");
  EXPECT_CONTAINS(StallShutdownNote(0), "wait for ever");
}

TFRING_TEST(Negotiator, ValidationMessagesNameTensorRanksAndValues) {
  Request base = Allreduce("grad/dense_1", {17, 3});
  Request other = base;
  other.shape = {18, 3};
  EXPECT_EQ(NegotiateOne({base, base, other}).error,
            std::string("Mismatched shapes for tensor 'grad/dense_1': rank 0 sent [17,3], "
                        "rank 2 sent [18,3]"));
  other = base;
  other.dtype = DataType::kInt32;
  EXPECT_EQ(NegotiateOne({base, other}).error,
            std::string("Mismatched data types for tensor 'grad/dense_1': rank 0 sent float32, "
                        "rank 1 sent int32"));
  other = base;
  other.kind = CollectiveKind::kBroadcast;
  EXPECT_CONTAINS(NegotiateOne({base, other}).error,
                  "Mismatched collectives for tensor 'grad/dense_1': rank 0 sent allreduce, "
                  "rank 1 sent broadcast");
  other = base;
  other.reduce_op = ReduceOp::kAverage;
  EXPECT_CONTAINS(NegotiateOne({base, other}).error,
                  "Mismatched reduce ops for tensor 'grad/dense_1': rank 0 sent Sum, rank 1 "
                  "sent Average");
  other = base;
  other.prescale_factor = 0.5;
  EXPECT_CONTAINS(NegotiateOne({base, other}).error,
                  "Mismatched prescale_factor for tensor 'grad/dense_1': rank 0 sent 1, rank 1 "
                  "sent 0.5");
  other = base;
  other.postscale_factor = 2;
  EXPECT_CONTAINS(NegotiateOne({base, other}).error, "Mismatched postscale_factor");

  Request bcast = base;
  bcast.kind = CollectiveKind::kBroadcast;
  other = bcast;
  other.root_rank = 2;
  const Response root = NegotiateOne({bcast, bcast, other});
  EXPECT_EQ(root.error, std::string("Mismatched root ranks for tensor 'grad/dense_1': rank 0 "
                                    "sent root_rank=0, rank 2 sent root_rank=2"));
  EXPECT_FALSE(root.cacheable);
  // Broadcast ignores the reduce op; allreduce ignores the root.
  other = bcast;
  other.reduce_op = ReduceOp::kMin;
  EXPECT_TRUE(NegotiateOne({bcast, other}).ok());
  other = base;
  other.root_rank = 1;
  EXPECT_TRUE(NegotiateOne({base, other}).ok());
}

TFRING_TEST(Negotiator, AllgatherFirstDimsMayDiffer) {
  Request a = Allreduce("ag", {2, 5});
  a.kind = CollectiveKind::kAllgather;
  Request b = a, c = a;
  b.shape = {0, 5};
  c.shape = {7, 5};
  const Response r = NegotiateOne({a, b, c});
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.first_dims == std::vector<int64_t>({2, 0, 7}));
  EXPECT_FALSE(r.cacheable) << "gathered sizes may change from step to step";
  c.shape = {7, 4};
  EXPECT_CONTAINS(NegotiateOne({a, b, c}).error,
                  "Mismatched shapes for tensor 'ag': rank 0 sent [2,5], rank 2 sent [7,4] "
                  "(allgather needs every dimension but the first to agree)");
  c.shape = {7, 5, 1};
  EXPECT_CONTAINS(NegotiateOne({a, b, c}).error, "rank 2 sent [7,5,1]");
}

TFRING_TEST(Negotiator, PendingOlderThanReportsOnlyIncompleteOldTensors) {
  Negotiator n(3);
  n.Add(0, Allreduce("old"), At(0));
  n.Add(2, Allreduce("old"), At(1));
  n.Add(1, Allreduce("young"), At(2));
  n.Add(0, Allreduce("done"), At(0));
  n.Add(1, Allreduce("done"), At(0));
  n.Add(2, Allreduce("done"), At(0));  // complete but not yet taken: not stalled
  auto stalled = n.PendingOlderThan(1.5, At(2.5));
  ASSERT_EQ(stalled.size(), 1u);
  EXPECT_EQ(stalled[0].name, std::string("old"));
  EXPECT_TRUE(stalled[0].submitted == std::vector<int>({0, 2}));
  EXPECT_TRUE(stalled[0].missing == std::vector<int>({1}));
  EXPECT_TRUE(stalled[0].waited_seconds > 2.4 && stalled[0].waited_seconds < 2.6);
  EXPECT_EQ(DescribeStalled(stalled),
            std::string("'old' (submitted by ranks [0, 2], missing on ranks [1], waiting 2 s)"));
  EXPECT_EQ(n.PendingOlderThan(0, At(2.5)).size(), 2u);
  EXPECT_TRUE(n.PendingOlderThan(3, At(2.5)).empty());
}

TFRING_TEST(Negotiator, DescribeStalledShortensLongLists) {
  std::vector<Negotiator::Stalled> many;
  for (int i = 0; i < 10; ++i) many.push_back({"t" + std::to_string(i), {0}, {1}, 5});
  const std::string s = DescribeStalled(many);
  EXPECT_CONTAINS(s, "'t7' (");
  EXPECT_TRUE(s.find("'t8'") == std::string::npos) << s;
  EXPECT_CONTAINS(s, "; and 2 more");
}


TFRING_TEST(Negotiator, ProcessSetsCompleteWithTheirMembers) {
  Negotiator n(3);
  Request a = Allreduce(NamedKey("w"), {2, 3}, {0, 2});
  n.Add(0, a, At(0));
  EXPECT_TRUE(n.TakeReady().empty());
  n.Add(2, a, At(0));
  const auto ready = n.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].ok()) << ready[0].error;
  EXPECT_TRUE(ready[0].key.set == std::vector<int32_t>({0, 2}));
  // A mismatch inside a set names the set's ranks.
  Request b = a;
  b.shape = {7};
  n.Add(2, a, At(0));
  n.Add(0, b, At(0));
  const auto mismatch = n.TakeReady();
  ASSERT_EQ(mismatch.size(), 1u);
  EXPECT_CONTAINS(mismatch[0].error, "rank 0 sent [7], rank 2 sent [2,3]");
  // Stall reports list the set's members only.
  n.Add(0, a, At(0));
  const auto stalled = n.PendingOlderThan(1, At(5));
  ASSERT_EQ(stalled.size(), 1u);
  EXPECT_TRUE(stalled[0].missing == std::vector<int>({2}));
}

TFRING_TEST(Negotiator, JoinedRanksCompleteTensorsAndAreListed) {
  Negotiator n(3);
  n.Add(2, Allreduce("g"), At(0));
  EXPECT_TRUE(n.TakeReady().empty());
  n.SetJoined({true, false, false});
  EXPECT_TRUE(n.TakeReady().empty()) << "rank 1 has neither submitted nor joined";
  n.SetJoined({true, true, false});  // completes without a new request
  auto ready = n.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].ok()) << ready[0].error;
  EXPECT_TRUE(ready[0].joined == std::vector<int32_t>({0, 1}));
  EXPECT_FALSE(ready[0].cacheable) << "who has joined holds for this call only";
  EXPECT_EQ(Contributors(ready[0], 3), 1);

  Request gather = Allreduce("ag", {4, 2});
  gather.kind = CollectiveKind::kAllgather;
  n.Add(2, gather, At(0));
  ready = n.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].first_dims == std::vector<int64_t>({0, 0, 4}));

  Request bcast = Allreduce("b");
  bcast.kind = CollectiveKind::kBroadcast;
  bcast.root_rank = 0;
  n.Add(2, bcast, At(0));
  ready = n.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_CONTAINS(ready[0].error, "its root rank 0 has joined");

  Request a2a = Allreduce("a2a", {3});
  a2a.kind = CollectiveKind::kAlltoall;
  a2a.splits = {1, 1, 1};
  n.Add(2, a2a, At(0));
  ready = n.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_CONTAINS(ready[0].error, "alltoall 'a2a' cannot run while rank(s) [0, 1]");
}

Request Unnamed(int64_t n, const std::string& site, int32_t part = -1,
                std::vector<int32_t> set = {}) {
  TensorKey key;
  key.unnamed = n;
  key.part = part;
  Request r = Allreduce(key, {2, 3}, std::move(set));
  r.key.call_site = site;
  return r;
}

TFRING_TEST(Negotiator, UnnamedCallsAtOneLineAreCachedByThatLine) {
  Request a = Unnamed(3, "train.py:7");
  a.cacheable = false;  // as the Python wrapper sends it: the name never recurs
  Response r = NegotiateOne({a, a});
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.cacheable);
  EXPECT_EQ(r.shared_call_site, std::string("train.py:7")) << "cached under the line, not the name";
  Request b = Unnamed(3, "train.py:9");
  r = NegotiateOne({a, b});
  EXPECT_TRUE(r.ok()) << "ranks that call from different lines still pair, in order";
  EXPECT_FALSE(r.cacheable) << "but no line is theirs to cache it under";
  EXPECT_EQ(r.shared_call_site, std::string());
  Request grouped = Allreduce("unnamed.4.1");
  grouped.key.call_site = "train.py:7";
  grouped.cacheable = false;
  EXPECT_FALSE(NegotiateOne({grouped, grouped}).cacheable)
      << "a grouped call's tensors share one line";
}

TFRING_TEST(Negotiator, RanksWaitingOnEachOthersMissingCallsFailBothCalls) {
  // Rank 0 made an extra unnamed call; rank 1 went on to a named one. Each waits in a call
  // the other has not made.
  Negotiator n(2);
  n.Add(0, Unnamed(5, "train.py:7"), At(0));
  n.Add(1, Allreduce("loss"), At(0.5));
  EXPECT_FALSE(n.HasDrifted(2.0, At(2.0)));  // not waited long enough yet
  EXPECT_TRUE(n.HasDrifted(2.0, At(2.6)));
  const auto failed = n.TakeDrifted(2.0, At(2.6));
  EXPECT_TRUE(Names(failed) == std::vector<std::string>({"unnamed.5", "loss"}));
  for (const Response& r : failed) {
    EXPECT_CONTAINS(r.error, "rank 0 waits in allreduce 'unnamed.5' (an unnamed call at "
                             "train.py:7), which rank 1 has not made, while rank 1 waits in "
                             "allreduce 'loss', which rank 0 has not made");
  }
  EXPECT_EQ(n.num_pending(), 0u);
}

TFRING_TEST(Negotiator, AWaitIsNoDriftUntilTheOtherRankWaitsElsewhere) {
  Negotiator n(3);
  n.Add(0, Unnamed(1, "a.py:1"), At(0));
  n.Add(1, Unnamed(1, "a.py:1"), At(0));
  EXPECT_FALSE(n.HasDrifted(2.0, At(10)));  // rank 2 is only late (computing)
  n.Add(2, Allreduce("named"), At(1));
  n.Add(0, Allreduce("named"), At(1));  // rank 0 has made 'named' too (another thread)
  EXPECT_TRUE(n.HasDrifted(2.0, At(10)));  // but rank 1 has not: 1 and 2 wait on each other
  // Named calls alone never count: ranks may name calls in any order across threads.
  Negotiator named(2);
  named.Add(0, Allreduce("x"), At(0));
  named.Add(1, Allreduce("y"), At(0));
  EXPECT_FALSE(named.HasDrifted(2.0, At(100)));
  // A rank that has joined waits on nothing.
  Negotiator joined(2);
  joined.Add(0, Unnamed(3, "a.py:2"), At(0));
  joined.Add(1, Allreduce("y"), At(0));
  joined.SetJoined({false, true});
  EXPECT_FALSE(joined.HasDrifted(2.0, At(100)));
}

TFRING_TEST(Negotiator, ADriftFailsEveryPartOfGroupedCallsAndWaitsCountPerRank) {
  Negotiator n(2);
  // Rank 0's extra call is an unnamed grouped op of three tensors (in a process set); rank 1
  // waits in a named grouped op of two. Rank 1 submits 3 s after rank 0.
  for (int i = 0; i < 3; ++i) {
    n.Add(0, Unnamed(5, "a.py:3", i, {0, 1}), At(0));
  }
  n.Add(1, Allreduce(PartKey(NamedKey("grads.group0"), 0)), At(3));
  n.Add(1, Allreduce(PartKey(NamedKey("grads.group0"), 1)), At(3));
  n.Add(1, Allreduce("other"), At(3));  // rank 1 waits in this too (another thread)
  EXPECT_FALSE(n.HasDrifted(2.0, At(4.5)));  // rank 1 has waited 1.5 s only
  const auto failed = n.TakeDrifted(2.0, At(5.5));
  // Every part of rank 0's call, and every part of the call of rank 1's it was paired with
  // (the grouped op, or 'other'): never a part alone.
  const std::vector<std::string> names = Names(failed);
  EXPECT_TRUE(names.size() == 5u || names.size() == 4u);
  for (int i = 0; i < 3; ++i) {
    const std::string part = "unnamed.5." + std::to_string(i) + " [process set 0, 1]";
    EXPECT_TRUE(std::find(names.begin(), names.end(), part) != names.end()) << part;
  }
  const bool grads = std::find(names.begin(), names.end(), "grads.group0.0") != names.end();
  EXPECT_EQ(grads, std::find(names.begin(), names.end(), "grads.group0.1") != names.end());
  EXPECT_EQ(n.num_pending(), grads ? 1u : 2u);
  for (const Response& r : failed) EXPECT_CONTAINS(r.error, "drifted apart");
}

TFRING_TEST(UnnamedNames, CatchUpMovesPastAFailedCall) {
  UnnamedNames names;
  EXPECT_EQ(names.Next({}), 0);
  TensorKey failed;
  failed.unnamed = 4;
  failed.part = 1;  // a grouped call's part
  names.CatchUp(failed);
  EXPECT_EQ(names.Next({}), 5);
  failed.unnamed = 2;
  names.CatchUp(failed);                 // behind: nothing changes
  names.CatchUp(NamedKey("unnamed.9"));  // a user's name: not an unnamed call
  EXPECT_EQ(names.Next({}), 6);
  EXPECT_EQ(names.Next({0, 2}), 0);  // per process set
  failed.unnamed = 3;
  failed.set = {0, 2};
  names.CatchUp(failed);
  EXPECT_EQ(names.Next({0, 2}), 4);
  EXPECT_EQ(names.Next({}), 7);
}

}  // namespace
}  // namespace tfring
