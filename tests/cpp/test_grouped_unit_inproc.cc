// A grouped allreduce that travels as one unit (Signature::parts): its tensors packed into
// one buffer as PlanParts places them, reduced there in place, of one dtype or of several
// (one reduction per run of a dtype), alone or fused with other tensors, with a joined
// rank's stand-in, and refused on every rank when the ranks' units differ. Ranks are
// threads (inproc_job.h).
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

// One submitted unit: its buffer (the kernel's packed inputs, then its outputs) and status.
struct Unit {
  std::vector<TensorPart> parts;
  Packed plan;
  std::vector<char> buffer;
  std::promise<Status> promise;
  std::shared_future<Status> status = promise.get_future().share();

  std::vector<double> Part(size_t i) const {
    const char* at = buffer.data() + plan.offsets[i];
    return Decode(parts[i].dtype, std::vector<char>(at, at + plan.bytes[i]));
  }
};
using UnitPtr = std::shared_ptr<Unit>;

// Packs TestValues(dtype, rank, count, salt + i) for each part, as a grouped op's kernel
// packs its inputs (PackInto), and submits the unit.
UnitPtr SubmitUnit(Coordinator* c, const std::string& name, std::vector<TensorPart> parts,
                   ReduceOp op, int rank, int salt, double postscale = 1.0) {
  auto unit = std::make_shared<Unit>();
  unit->parts = std::move(parts);
  unit->plan = PlanParts(unit->parts);
  unit->buffer.assign(unit->plan.total_bytes + 1, 0x5A);  // +1: never a null data()
  std::vector<std::vector<char>> inputs;
  std::vector<const void*> pointers;
  for (size_t i = 0; i < unit->parts.size(); ++i) {
    const TensorPart& part = unit->parts[i];
    inputs.push_back(
        Encode(part.dtype, TestValues(part.dtype, rank, NumElements(part.shape), salt + i)));
    pointers.push_back(inputs.back().data());
  }
  PackInto(unit->plan, pointers, unit->buffer.data());  // zeroes the gaps the 0x5A filled
  Entry e;
  e.request.key.name = name;
  e.request.kind = CollectiveKind::kAllreduce;
  e.request.reduce_op = op;
  e.request.postscale_factor = postscale;
  e.request.parts = unit->parts;
  DescribeUnit(&e.request);
  e.input = unit->buffer.data();
  e.output = unit->buffer.data();
  e.done = [unit](const Status& s) { unit->promise.set_value(s); };
  c->Enqueue(std::move(e));
  return unit;
}

Status Wait(const UnitPtr& unit) {
  if (unit->status.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return Status::Internal("the unit did not complete in 10 s");
  }
  return unit->status.get();
}

// Every part holds the allreduce over `size` ranks (times `postscale`), and every gap of
// the buffer is still zero.
void ExpectReduced(const UnitPtr& unit, ReduceOp op, int size, int salt, double postscale = 1.0) {
  const Status s = Wait(unit);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < unit->parts.size(); ++i) {
    const TensorPart& part = unit->parts[i];
    std::vector<double> want =
        ExpectedAllreduce(part.dtype, op, size, NumElements(part.shape), salt + i);
    for (double& x : want) x *= postscale;
    std::string why;
    EXPECT_TRUE(AllClose(part.dtype, unit->Part(i), want, &why))
        << "part " << i << " (" << DataTypeName(part.dtype) << ", " << ReduceOpName(op)
        << "): " << why;
  }
  std::vector<bool> covered(unit->plan.total_bytes, false);
  for (size_t i = 0; i < unit->parts.size(); ++i) {
    for (int64_t b = 0; b < unit->plan.bytes[i]; ++b) covered[unit->plan.offsets[i] + b] = true;
  }
  for (int64_t b = 0; b < unit->plan.total_bytes; ++b) {
    if (!covered[b]) EXPECT_EQ(unit->buffer[b], 0) << "gap byte " << b;
  }
}

// Tensors of 3, 17, 0, 16 and 5 elements: gaps of several sizes, an empty tensor, one that
// ends on the alignment.
std::vector<TensorPart> OneDtype(DataType dtype) {
  return {{dtype, {3}}, {dtype, {17}}, {dtype, {0}}, {dtype, {4, 4}}, {dtype, {5}}};
}
// Runs of float32, int32 (two tensors), float64 and int64.
std::vector<TensorPart> Mixed() {
  return {{DataType::kFloat32, {3}},
          {DataType::kInt32, {17}},
          {DataType::kInt32, {2, 3}},
          {DataType::kFloat64, {0}},
          {DataType::kFloat64, {5}},
          {DataType::kInt64, {4}}};
}

TFRING_TEST(GroupedUnit, PlanAlignsEachTensorAndTheEnd) {
  const Packed p = PlanParts(OneDtype(DataType::kFloat32));
  EXPECT_TRUE(p.offsets == std::vector<int64_t>({0, 64, 192, 192, 256}));
  EXPECT_EQ(p.total_bytes, 320);  // 256 + 20, rounded up
  Signature s;
  s.parts = Mixed();
  DescribeUnit(&s);
  EXPECT_TRUE(s.dtype == DataType::kUInt8);
  EXPECT_TRUE(s.shape == Shape({PlanParts(s.parts).total_bytes}));
  s.parts = OneDtype(DataType::kFloat64);
  DescribeUnit(&s);
  EXPECT_TRUE(s.dtype == DataType::kFloat64);
  EXPECT_TRUE(s.shape == Shape({PlanParts(s.parts).total_bytes / 8}));
}

TFRING_TEST(GroupedUnit, OneOrSeveralDtypesEveryOpTwiceOver) {
  for (int size : {2, 3}) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      Coordinator* c = job.rank(rank);
      int salt = 0;
      for (int round = 0; round < 2; ++round) {  // the second from the response cache
        for (ReduceOp op : kAllOps) {
          for (bool mixed : {false, true}) {
            const std::string name = std::string("u.") + ReduceOpName(op) + (mixed ? ".mixed" : "");
            UnitPtr u = SubmitUnit(c, name, mixed ? Mixed() : OneDtype(DataType::kFloat32), op,
                                   rank, salt);
            ExpectReduced(u, op, size, salt);
            salt += 10;
          }
        }
      }
    });
  }
}

TFRING_TEST(GroupedUnit, FusedWithOtherTensorsAndScaled) {
  InprocJob job(2, TestOptions());
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    for (int round = 0; round < 3; ++round) {
      // Submitted together: the unit and the lone tensor share a cycle and, both float32
      // sums below the fusion threshold, a fusion buffer; the mixed unit goes alone.
      UnitPtr u =
          SubmitUnit(c, "f.unit", OneDtype(DataType::kFloat32), ReduceOp::kSum, rank, 0, 2.0);
      OpPtr lone = SubmitAllreduce(c, "f.lone", DataType::kFloat32, {7},
                                   TestValues(DataType::kFloat32, rank, 7, 50), ReduceOp::kSum);
      UnitPtr m = SubmitUnit(c, "f.mixed", Mixed(), ReduceOp::kSum, rank, 60, 3.0);
      ExpectReduced(u, ReduceOp::kSum, 2, 0, 2.0);
      ExpectAllreduced(lone, ReduceOp::kSum, 2, 50);
      ExpectReduced(m, ReduceOp::kSum, 2, 60, 3.0);
    }
  });
}

// This rank's tfring.join, waited for.
Status Join(Coordinator* c) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> joined = done->get_future();
  auto last = std::make_shared<int32_t>(-1);  // the last rank to join; alive until `done`
  Entry e;
  e.request.key.name = "tfring.join";
  e.request.kind = CollectiveKind::kJoin;
  e.request.dtype = DataType::kInt32;
  e.request.cacheable = false;
  e.output = last.get();
  e.done = [done, last](const Status& s) { done->set_value(s); };
  c->Enqueue(std::move(e));
  if (joined.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return Status::Internal("the join did not complete in 10 s");
  }
  return joined.get();
}

TFRING_TEST(GroupedUnit, AJoinedRankStandsInWithEachDtypesIdentity) {
  InprocJob job(3, TestOptions());
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    if (rank == 2) {  // out of data at once
      ASSERT_TRUE(Join(c).ok());
      return;
    }
    // Ranks 0 and 1 reduce; rank 2 contributes each part's identity in its own dtype.
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kProduct, ReduceOp::kAverage}) {
      ExpectReduced(SubmitUnit(c, std::string("j.") + ReduceOpName(op), Mixed(), op, rank, 7),
                    op, 2, 7);
    }
    EXPECT_TRUE(Join(c).ok());  // this rank's join, so that rank 2's completes
  });
}

// Rank 1 submits `theirs` where rank 0 submits the unit of OneDtype(kFloat32): both fail
// at once, with `needle` in the message.
void ExpectRefused(const std::vector<TensorPart>& theirs, const std::string& needle) {
  InprocJob job(2, TestOptions());
  job.OnEveryRank([&](int rank) {
    UnitPtr u = SubmitUnit(job.rank(rank), "bad", rank == 0 ? OneDtype(DataType::kFloat32) : theirs,
                           ReduceOp::kSum, rank, 0);
    const Status s = Wait(u);
    EXPECT_TRUE(s.code() == StatusCode::kFailedPrecondition) << s.message();
    EXPECT_CONTAINS(s.message(), needle);
  });
}

TFRING_TEST(GroupedUnit, RanksWhoseUnitsDifferAreToldWhichTensor) {
  std::vector<TensorPart> shape = OneDtype(DataType::kFloat32);
  shape[3].shape = {16};  // as many elements, another shape
  ExpectRefused(shape, "Mismatched shapes for tensor 'bad.3': rank 0 sent [4,4], rank 1 sent [16]");
  std::vector<TensorPart> dtype = OneDtype(DataType::kFloat32);
  dtype[1].dtype = DataType::kInt32;
  ExpectRefused(dtype,
                "Mismatched data types for tensor 'bad.1': rank 0 sent float32, rank 1 sent int32");
  std::vector<TensorPart> more = OneDtype(DataType::kFloat32);
  more.push_back({DataType::kFloat32, {1}});
  ExpectRefused(more, "rank 0 sent a grouped allreduce of 5 tensors, rank 1 sent a grouped "
                      "allreduce of 6 tensors");
}

TFRING_TEST(GroupedUnit, AUnitAndALoneTensorOfOneNameAreRefused) {
  InprocJob job(2, TestOptions());
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    Status s;
    if (rank == 0) {
      s = Wait(SubmitUnit(c, "both", OneDtype(DataType::kFloat32), ReduceOp::kSum, rank, 0));
    } else {
      OpPtr op = SubmitAllreduce(c, "both", DataType::kFloat32, {80},
                                 TestValues(DataType::kFloat32, rank, 80), ReduceOp::kSum);
      s = WaitFor(op);
    }
    EXPECT_CONTAINS(s.message(), "one tensor (not a grouped allreduce)");
  });
}

}  // namespace
}  // namespace testing
}  // namespace tfring
