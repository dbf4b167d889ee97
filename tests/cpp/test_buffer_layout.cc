// Where fused tensors sit in the fusion buffers (core/buffer_layout.h): the one plan that
// the host and NCCL executors both pack and unpack by.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/buffer_layout.h"

namespace tfring {
namespace {

Entry TensorOf(DataType dtype, Shape shape) {
  Entry e;
  e.request.dtype = dtype;
  e.request.shape = std::move(shape);
  return e;
}

TFRING_TEST(BufferLayout, PackedPutsWholeTensorsOneAfterAnother) {
  Entry a = TensorOf(DataType::kFloat32, {3, 2}), b = TensorOf(DataType::kFloat32, {0}),
        c = TensorOf(DataType::kFloat64, {5});
  const Packed p = PlanPacked({&a, &b, &c});
  EXPECT_TRUE(p.offsets == std::vector<int64_t>({0, 24, 24}));
  EXPECT_TRUE(p.bytes == std::vector<int64_t>({24, 0, 40}));
  EXPECT_EQ(p.total_bytes, 64);
}

TFRING_TEST(BufferLayout, GatherBlocksHoldEachRanksRowsTensorAfterTensor) {
  // Two tensors with rows of 8 and 4 bytes; three ranks with uneven rows.
  Entry a = TensorOf(DataType::kFloat32, {1, 2}), b = TensorOf(DataType::kInt32, {2});
  Response ra, rb;
  ra.first_dims = {2, 1, 0};
  rb.first_dims = {1, 3, 2};
  const GatherLayout l = PlanGather({&a, &b}, {&ra, &rb}, /*rank=*/1, /*size=*/3);
  EXPECT_TRUE(l.bytes_per_rank == std::vector<int64_t>({2 * 8 + 1 * 4, 1 * 8 + 3 * 4, 2 * 4}));
  EXPECT_EQ(l.total_bytes, 20 + 20 + 8);
  // Rank 1 sends its 1 row of a, then its 3 rows of b.
  EXPECT_TRUE(l.send.offsets == std::vector<int64_t>({0, 8}));
  EXPECT_TRUE(l.send.bytes == std::vector<int64_t>({8, 12}));
  EXPECT_EQ(l.send.total_bytes, l.bytes_per_rank[1]);
  // Unpacking walks the blocks rank by rank: a's rows land one after another in a's output.
  ASSERT_EQ(l.pieces.size(), 6u);
  int64_t a_to = 0, b_to = 0, from = 0;
  for (const GatherPiece& piece : l.pieces) {
    EXPECT_EQ(piece.from_offset, from);
    int64_t& to = piece.tensor == 0 ? a_to : b_to;
    EXPECT_EQ(piece.to_offset, to);
    to += piece.bytes;
    from += piece.bytes;
  }
  EXPECT_EQ(a_to, 3 * 8);
  EXPECT_EQ(b_to, 6 * 4);
}

TFRING_TEST(BufferLayout, ALoneTensorNeedsNoUnpacking) {
  Entry a = TensorOf(DataType::kFloat32, {1, 2});
  Response ra;
  ra.first_dims = {2, 1};
  const GatherLayout l = PlanGather({&a}, {&ra}, 0, 2);
  EXPECT_TRUE(l.pieces.empty());
  EXPECT_EQ(l.send.total_bytes, 16);
  EXPECT_EQ(l.total_bytes, 24);
}

}  // namespace
}  // namespace tfring
