// The fusion planner (core/fusion.h): which ready tensors share one backend call.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/fusion.h"

#include <cstdint>

namespace tfring {
namespace {

using Groups = std::vector<std::vector<int>>;

Response R(CollectiveKind kind, DataType dtype, ReduceOp op = ReduceOp::kSum, int root = 0) {
  Response r;
  r.kind = kind;
  r.dtype = dtype;
  r.reduce_op = op;
  r.root_rank = root;
  return r;
}

// Plans `responses` with the given sizes.
Groups Plan(const std::vector<Response>& responses, const std::vector<int64_t>& bytes,
            int64_t threshold, int64_t alone_bytes = INT64_MAX) {
  std::vector<FusionItem> items;
  for (size_t i = 0; i < responses.size(); ++i) items.push_back({&responses[i], bytes[i]});
  return PlanFusion(items, threshold, alone_bytes);
}

std::string Show(const Groups& g) {
  std::string s;
  for (const auto& group : g) {
    s += "{";
    for (size_t i = 0; i < group.size(); ++i) s += (i ? "," : "") + std::to_string(group[i]);
    s += "}";
  }
  return s;
}

constexpr auto kAR = CollectiveKind::kAllreduce;
constexpr auto kAG = CollectiveKind::kAllgather;
constexpr auto kBC = CollectiveKind::kBroadcast;
constexpr auto kF32 = DataType::kFloat32;

TFRING_TEST(Fusion, GroupsByKindDtypeOpAndRoot) {
  const std::vector<Response> rs = {
      R(kAR, kF32),                            // 0
      R(kAR, DataType::kFloat16),              // 1: other dtype
      R(kAR, kF32, ReduceOp::kMax),            // 2: other op
      R(kAG, kF32),                            // 3: other kind
      R(kBC, kF32, ReduceOp::kSum, 1),         // 4
      R(kBC, kF32, ReduceOp::kMax, 0),         // 5: other root (op does not matter)
      R(kAR, kF32),                            // 6 -> with 0
      R(kBC, kF32, ReduceOp::kMin, 1),         // 7 -> with 4
      R(kAG, kF32),                            // 8 -> with 3
      R(kAR, kF32, ReduceOp::kAverage),        // 9: Average is not Sum
  };
  const Groups g = Plan(rs, std::vector<int64_t>(rs.size(), 8), 1024);
  EXPECT_EQ(Show(g), std::string("{0,6}{1}{2}{3,8}{4,7}{5}{9}"));
}

TFRING_TEST(Fusion, ThresholdIsRespected) {
  const std::vector<Response> rs(6, R(kAR, kF32));
  // First fit, in order: a group closes to a tensor that would pass the threshold, but a
  // later smaller one may still join it.
  const Groups g = Plan(rs, {60, 30, 50, 10, 40, 1}, 100);
  EXPECT_EQ(Show(g), std::string("{0,1,3}{2,4,5}"));
  for (const auto& group : g) {
    int64_t total = 0;
    for (int i : group) total += std::vector<int64_t>({60, 30, 50, 10, 40, 1})[i];
    EXPECT_LE(total, 100);
  }
  EXPECT_EQ(Show(Plan(rs, {50, 50, 1, 1, 1, 1}, 100)), std::string("{0,1}{2,3,4,5}"));
}

TFRING_TEST(Fusion, TensorAtOrAboveThresholdTravelsAlone) {
  const std::vector<Response> rs(5, R(kAR, kF32));
  EXPECT_EQ(Show(Plan(rs, {10, 100, 10, 250, 10}, 100)), std::string("{0,2,4}{1}{3}"));
}

TFRING_TEST(Fusion, LargeTensorsTravelAloneBelowTheThreshold) {
  // alone_bytes 64: the 64- and 100-byte tensors go alone although the buffer could hold them.
  const std::vector<Response> rs(5, R(kAR, kF32));
  EXPECT_EQ(Show(Plan(rs, {10, 64, 20, 100, 63}, 1000, 64)), std::string("{0,2,4}{1}{3}"));
}

TFRING_TEST(Fusion, GpuTensorsFuseUpToTheThresholdHoweverLarge) {
  // alone_bytes 64 holds for host tensors only: the GPU's 64- and 100-byte tensors fuse with
  // the small ones (the device copies cost far less than a call), still within the threshold.
  std::vector<Response> rs(6, R(kAR, kF32));
  for (int i : {0, 1, 2, 5}) rs[i].on_device = true;
  EXPECT_EQ(Show(Plan(rs, {10, 64, 100, 64, 20, 900}, 1000, 64)),
            std::string("{0,1,2}{3}{4}{5}"));
}

TFRING_TEST(Fusion, ThresholdZeroDisablesFusion) {
  const std::vector<Response> rs(4, R(kAR, kF32));
  EXPECT_EQ(Show(Plan(rs, {4, 0, 8, 4}, 0)), std::string("{0}{1}{2}{3}"));
}

TFRING_TEST(Fusion, EmptyPlan) { EXPECT_TRUE(Plan({}, {}, 100).empty()); }


TFRING_TEST(Fusion, ResponsesWithOtherJoinedRanksTravelApart) {
  // An Average divides the whole fused buffer by one count of ranks with data.
  Response a = R(kAR, DataType::kFloat32, ReduceOp::kAverage);
  Response b = a, c = a;
  b.joined = {2};
  EXPECT_EQ(Show(Plan({a, b, c}, {4, 4, 4}, 1 << 20)), std::string("{0,2}{1}"));
}

}  // namespace
}  // namespace tfring
