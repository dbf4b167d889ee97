// A grouped op whose outputs lie in one region, laid out as the host executor packs a fused
// group (Entry::output_region): the reduction runs in the region itself. Checked through
// what only that path writes: the gaps between tensors are zeroed in the region, while the
// fusion-buffer path never writes a byte outside the outputs. Ranks are threads
// (inproc_job.h), at sizes 2 and 3.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/buffer_layout.h"

namespace tfring {
namespace testing {
namespace {

constexpr unsigned char kSentinel = 0xAB;
// Float32 tensors of 3, 17, 0, 16 and 5 elements: gaps of several sizes, an empty tensor,
// and one that ends exactly on the alignment.
const std::vector<int64_t> kCounts = {3, 17, 0, 16, 5};

enum class Layout {
  kRegion,          // laid out in one region, and the entries say so
  kUnmarked,        // laid out alike, but output_region left null
  kRegionReversed,  // laid out in one region, but tensor after tensor in reverse order
};

// Where each tensor's output starts in the region, and the region's plan.
struct Placed {
  std::vector<int64_t> offsets;  // of tensor i
  Packed plan;                   // in placement order
};

Placed Place(Layout layout) {
  const int n = static_cast<int>(kCounts.size());
  std::vector<int> order(n);  // order[k]: the tensor placed k-th
  for (int i = 0; i < n; ++i) order[i] = layout == Layout::kRegionReversed ? n - 1 - i : i;
  std::vector<int64_t> bytes;
  for (int i : order) bytes.push_back(kCounts[i] * 4);
  Placed placed;
  placed.plan = PlanPackedBytes(bytes, kHostAllreduceAlignment);
  placed.offsets.resize(n);
  for (int k = 0; k < n; ++k) placed.offsets[order[k]] = placed.plan.offsets[k];
  return placed;
}

// Runs one grouped allreduce (Sum) of kCounts on this rank, its outputs placed per
// `layout` in `region` (filled with kSentinel first, 64 bytes longer than the plan), and
// checks every output against the sum over ranks.
void RunGrouped(Coordinator* c, int rank, int size, Layout layout, std::vector<char>* region,
                const Placed& placed) {
  const int n = static_cast<int>(kCounts.size());
  region->assign(placed.plan.total_bytes + 64, static_cast<char>(kSentinel));
  std::vector<std::vector<char>> inputs(n);
  std::vector<Entry> entries(n);
  auto remaining = std::make_shared<std::atomic<int>>(n);
  auto all_done = std::make_shared<std::promise<Status>>();
  std::future<Status> finished = all_done->get_future();
  for (int i = 0; i < n; ++i) {
    inputs[i] = Encode(DataType::kFloat32, TestValues(DataType::kFloat32, rank, kCounts[i], i));
    Entry& e = entries[i];
    e.request.name = "grouped." + std::to_string(i);
    e.request.dtype = DataType::kFloat32;
    e.request.shape = {kCounts[i]};
    e.request.reduce_op = ReduceOp::kSum;
    e.input = inputs[i].data();
    e.output = region->data() + placed.offsets[i];
    if (layout != Layout::kUnmarked) {
      e.output_region = region->data();
      e.output_region_bytes = static_cast<int64_t>(region->size());
    }
    e.done = [remaining, all_done](const Status& s) {
      if (!s.ok()) all_done->set_value(s);
      else if (remaining->fetch_sub(1) == 1) all_done->set_value(Status::OK());
    };
  }
  std::vector<char*> outputs;
  for (const Entry& e : entries) outputs.push_back(static_cast<char*>(e.output));
  c->EnqueueAll(std::move(entries));
  ASSERT_TRUE(finished.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  ASSERT_TRUE(finished.get().ok());
  for (int i = 0; i < n; ++i) {
    std::vector<char> got(outputs[i], outputs[i] + kCounts[i] * 4);
    std::string why;
    EXPECT_TRUE(AllClose(DataType::kFloat32, Decode(DataType::kFloat32, got),
                         ExpectedAllreduce(DataType::kFloat32, ReduceOp::kSum, size, kCounts[i], i),
                         &why))
        << "grouped." << i << ": " << why;
  }
}

// The bytes of `region` that no output covers: the gaps of the plan and the tail.
std::vector<unsigned char> Gaps(const std::vector<char>& region, const Packed& plan) {
  std::vector<bool> covered(region.size(), false);
  for (size_t i = 0; i < plan.offsets.size(); ++i) {
    for (int64_t b = 0; b < plan.bytes[i]; ++b) covered[plan.offsets[i] + b] = true;
  }
  std::vector<unsigned char> gaps;
  for (size_t b = 0; b < region.size(); ++b) {
    if (!covered[b]) gaps.push_back(static_cast<unsigned char>(region[b]));
  }
  return gaps;
}

TFRING_TEST(OutputRegion, PlanStartsEachTensorAtTheAlignment) {
  const Packed p = Place(Layout::kRegion).plan;
  EXPECT_TRUE(p.offsets == std::vector<int64_t>({0, 64, 192, 192, 256}));
  EXPECT_EQ(p.total_bytes, 256 + 20);
}

TFRING_TEST(OutputRegion, ReducesInTheRegionAndZeroesItsGaps) {
  for (int size : {2, 3}) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      const Placed placed = Place(Layout::kRegion);
      const Packed& plan = placed.plan;
      std::vector<char> region;
      RunGrouped(job.rank(rank), rank, size, Layout::kRegion, &region, placed);
      const std::vector<unsigned char> gaps = Gaps(region, plan);
      const size_t tail = region.size() - plan.total_bytes;
      ASSERT_EQ(gaps.size(), 52u + 60u + tail);
      // The gaps inside the span were the fusion buffer's; the tail lies outside it.
      for (size_t b = 0; b < gaps.size() - tail; ++b) EXPECT_EQ(gaps[b], 0) << "gap byte " << b;
      for (size_t b = gaps.size() - tail; b < gaps.size(); ++b) EXPECT_EQ(gaps[b], kSentinel);
    });
  }
}

TFRING_TEST(OutputRegion, OutputsNotMarkedOrOutOfOrderAreNeverWrittenAround) {
  for (Layout layout : {Layout::kUnmarked, Layout::kRegionReversed}) {
    for (int size : {2, 3}) {
      InprocJob job(size, TestOptions());
      job.OnEveryRank([&](int rank) {
        const Placed placed = Place(layout);
        std::vector<char> region;
        RunGrouped(job.rank(rank), rank, size, layout, &region, placed);
        for (unsigned char byte : Gaps(region, placed.plan)) EXPECT_EQ(byte, kSentinel);
      });
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
