// The coordinator end to end, with ranks as threads: one Coordinator per rank over the
// in-process control plane and backend (inproc_job.h), at sizes 2 and 3 (odd sizes catch
// uneven splits). Every rank computes the expected global result itself.
#include <algorithm>
#include <chrono>
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

TFRING_TEST(CoordinatorInproc, AllreduceEveryOpAndDtype) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      int salt = 0;
      for (DataType dtype : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16}) {
        for (ReduceOp op : kAllOps) {
          const std::string name = std::string("ar/") + DataTypeName(dtype) + "/" + ReduceOpName(op);
          OpPtr p = SubmitAllreduce(job.rank(rank), name, dtype, {3, 4},
                                    TestValues(dtype, rank, 12, salt), op);
          ExpectAllreduced(p, op, size, salt);
          ++salt;
        }
      }
    });
  }
}

TFRING_TEST(CoordinatorInproc, AllreduceScaleFactors) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      Entry e;
      std::vector<float> in = {1, 2, 3}, out(3);
      auto done = std::make_shared<std::promise<Status>>();
      auto status = done->get_future();
      e.request.key.name = "scaled";
      e.request.shape = {3};
      e.request.prescale_factor = 2.0;
      e.request.postscale_factor = 0.25;
      e.input = in.data();
      e.output = out.data();
      e.done = [done](const Status& s) { done->set_value(s); };
      job.rank(rank)->Enqueue(std::move(e));
      ASSERT_TRUE(status.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
      ASSERT_TRUE(status.get().ok());
      for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], in[i] * size * 0.5f) << "element " << i;
    });
  }
}

TFRING_TEST(CoordinatorInproc, AllgatherUnevenFirstDims) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      // Rank r sends r+1 rows (a), and 2*r rows (b: none from rank 0); submitted together,
      // so they are fused into one backend call.
      OpPtr a = SubmitAllgather(job.rank(rank), "ag/a", DataType::kFloat32, {rank + 1, 2},
                                TestValues(DataType::kFloat32, rank, (rank + 1) * 2, 1));
      OpPtr b = SubmitAllgather(job.rank(rank), "ag/b", DataType::kInt32, {2 * rank, 3},
                                TestValues(DataType::kInt32, rank, 2 * rank * 3, 2));
      std::vector<double> want_a, want_b;
      int64_t rows_a = 0, rows_b = 0;
      for (int r = 0; r < size; ++r) {
        auto va = TestValues(DataType::kFloat32, r, (r + 1) * 2, 1);
        auto vb = TestValues(DataType::kInt32, r, 2 * r * 3, 2);
        want_a.insert(want_a.end(), va.begin(), va.end());
        want_b.insert(want_b.end(), vb.begin(), vb.end());
        rows_a += r + 1;
        rows_b += 2 * r;
      }
      for (const OpPtr& p : {a, b}) {
        const Status s = WaitFor(p);
        ASSERT_TRUE(s.ok()) << p->name << ": " << s.ToString();
      }
      EXPECT_TRUE(a->output_shape == Shape({rows_a, 2})) << ShapeToString(a->output_shape);
      EXPECT_TRUE(b->output_shape == Shape({rows_b, 3})) << ShapeToString(b->output_shape);
      std::string why;
      EXPECT_TRUE(AllClose(DataType::kFloat32, a->Result(), want_a, &why)) << why;
      EXPECT_TRUE(AllClose(DataType::kInt32, b->Result(), want_b, &why)) << why;
    });
  }
}

TFRING_TEST(CoordinatorInproc, BroadcastFromNonZeroRoot) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    const int root = size - 1;
    job.OnEveryRank([&](int rank) {
      std::vector<OpPtr> ops;  // one alone, then three submitted together (fused)
      ops.push_back(SubmitBroadcast(job.rank(rank), "bc/alone", DataType::kFloat64, {5},
                                    TestValues(DataType::kFloat64, rank, 5, 0), root));
      ASSERT_TRUE(WaitFor(ops[0]).ok());
      for (int i = 1; i <= 3; ++i) {
        ops.push_back(SubmitBroadcast(job.rank(rank), "bc/" + std::to_string(i), DataType::kInt8,
                                      {i, 2}, TestValues(DataType::kInt8, rank, i * 2, i), root));
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        const Status s = WaitFor(ops[i]);
        ASSERT_TRUE(s.ok()) << ops[i]->name << ": " << s.ToString();
        const int64_t n = static_cast<int64_t>(ops[i]->input.size() / DataTypeSize(ops[i]->dtype));
        EXPECT_TRUE(ops[i]->Result() == TestValues(ops[i]->dtype, root, n, static_cast<int>(i)))
            << ops[i]->name << " on rank " << rank << " does not hold root " << root << "'s values";
      }
    });
  }
}

TFRING_TEST(CoordinatorInproc, OrderIndependence) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      // Rank 0 forward, odd ranks reversed, other even ranks rotated by 7.
      std::vector<int> order(20);
      for (int i = 0; i < 20; ++i) order[i] = i;
      if (rank % 2 == 1) std::reverse(order.begin(), order.end());
      else if (rank > 0) std::rotate(order.begin(), order.begin() + 7, order.end());
      std::vector<OpPtr> ops(20);
      for (int i : order) {
        const DataType dtype = i % 2 ? DataType::kInt32 : DataType::kFloat32;
        ops[i] = SubmitAllreduce(job.rank(rank), "order/" + std::to_string(i), dtype, {i + 1},
                                 TestValues(dtype, rank, i + 1, i), ReduceOp::kSum);
      }
      for (int i = 0; i < 20; ++i) ExpectAllreduced(ops[i], ReduceOp::kSum, size, i);
    });
  }
}

// Submits 40 small tensors of mixed dtypes and ops on every rank, either all at once or one
// at a time, checks each, and returns rank 0's results.
std::vector<std::vector<double>> RunManySmall(InprocJob* job, bool at_once) {
  std::vector<std::vector<double>> results(40);
  job->OnEveryRank([&](int rank) {
    std::vector<OpPtr> ops;
    std::vector<ReduceOp> reduce;
    for (int i = 0; i < 40; ++i) {
      const DataType dtype = i % 3 == 0 ? DataType::kFloat16 : DataType::kFloat32;
      const ReduceOp op = i % 4 == 0 ? ReduceOp::kAverage : ReduceOp::kSum;
      ops.push_back(SubmitAllreduce(job->rank(rank), "small/" + std::to_string(i), dtype,
                                    {i % 5 + 1}, TestValues(dtype, rank, i % 5 + 1, i), op));
      reduce.push_back(op);
      if (!at_once) ExpectAllreduced(ops.back(), op, job->size(), i);
    }
    for (int i = 0; i < 40; ++i) {
      if (at_once) ExpectAllreduced(ops[i], reduce[i], job->size(), i);
      if (rank == 0) results[i] = ops[i]->Result();
    }
  });
  return results;
}

TFRING_TEST(CoordinatorInproc, FusionGivesSameResultsAsOneAtATime) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    const auto fused = RunManySmall(&job, /*at_once=*/true);
    const auto alone = RunManySmall(&job, /*at_once=*/false);
    for (int i = 0; i < 40; ++i) EXPECT_TRUE(fused[i] == alone[i]) << "small/" << i;
  }
}

// A fused Average leaves the fusion buffer scaled into each output in one pass
// (HostExecutor::Postprocess): every dtype, with lengths around the scaling's blocks of 8.
TFRING_TEST(CoordinatorInproc, FusedAverageOfEveryDtype) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      // Queued together (as one grouped op's tensors), so each dtype's three are taken in
      // one cycle and fused.
      std::vector<Entry> entries;
      const EnqueueFn collect = [&entries](Entry e) { entries.push_back(std::move(e)); };
      std::vector<OpPtr> ops;
      int salt = 0;
      for (DataType dtype : kHostDtypes) {
        for (int64_t n : {9, 16, 33}) {
          ops.push_back(SubmitAllreduce(collect, "avg/" + std::to_string(salt), dtype, {n},
                                        TestValues(dtype, rank, n, salt), ReduceOp::kAverage));
          ++salt;
        }
      }
      job.rank(rank)->EnqueueAll(std::move(entries));
      for (size_t i = 0; i < ops.size(); ++i) {
        ExpectAllreduced(ops[i], ReduceOp::kAverage, size, static_cast<int>(i));
      }
    });
  }
}

// One op's tensors queued together, one of them with a bad process set: that one fails at
// once, and the others, before and after it, run as usual (EnqueueAll keeps them in place).
TFRING_TEST(CoordinatorInproc, AGroupWithABadTensorRunsTheOthers) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      std::vector<Entry> entries;
      const EnqueueFn collect = [&entries](Entry e) { entries.push_back(std::move(e)); };
      const EnqueueFn collect_bad = [&entries](Entry e) {
        e.request.key.set = {0, 0};  // not distinct: refused before it is queued
        entries.push_back(std::move(e));
      };
      std::vector<OpPtr> ops;
      for (int i = 0; i < 4; ++i) {
        ops.push_back(SubmitAllreduce(i == 1 ? collect_bad : collect, "part/" + std::to_string(i),
                                      DataType::kFloat32, {5},
                                      TestValues(DataType::kFloat32, rank, 5, i), ReduceOp::kSum));
      }
      job.rank(rank)->EnqueueAll(std::move(entries));
      ExpectFailure(ops[1], StatusCode::kInvalidArgument, "must list distinct ranks");
      for (int i : {0, 2, 3}) ExpectAllreduced(ops[i], ReduceOp::kSum, size, i);
    });
  }
}

TFRING_TEST(CoordinatorInproc, FusionThresholdZero) {
  for (int size : kSizes) {
    Options o = TestOptions();
    o.fusion_threshold_bytes = 0;
    InprocJob job(size, o);
    RunManySmall(&job, /*at_once=*/true);
  }
}

TFRING_TEST(CoordinatorInproc, ResponseCacheAcrossSteps) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    int64_t rounds_after_first = 0;
    for (int step = 0; step < 5; ++step) {
      job.OnEveryRank([&](int rank) {
        std::vector<OpPtr> ops;
        for (int i = 0; i < 4; ++i) {
          ops.push_back(SubmitAllreduce(job.rank(rank), "cached/" + std::to_string(i),
                                        DataType::kFloat32, {4},
                                        TestValues(DataType::kFloat32, rank, 4, step * 10 + i),
                                        ReduceOp::kSum));
        }
        for (int i = 0; i < 4; ++i) ExpectAllreduced(ops[i], ReduceOp::kSum, size, step * 10 + i);
      });
      if (step == 0) rounds_after_first = job.negotiation_rounds(0);
    }
    // Steps 2..5 hit the cache on every rank: no names travelled, no negotiation round.
    EXPECT_EQ(job.negotiation_rounds(0), rounds_after_first) << "at size " << size;
    // A new shape for a cached name, on every rank: the slot is invalidated, renegotiated.
    job.OnEveryRank([&](int rank) {
      OpPtr p = SubmitAllreduce(job.rank(rank), "cached/0", DataType::kFloat32, {7},
                                TestValues(DataType::kFloat32, rank, 7, 99), ReduceOp::kSum);
      ExpectAllreduced(p, ReduceOp::kSum, size, 99);
      OpPtr again = SubmitAllreduce(job.rank(rank), "cached/0", DataType::kFloat32, {7},
                                    TestValues(DataType::kFloat32, rank, 7, 98), ReduceOp::kSum);
      ExpectAllreduced(again, ReduceOp::kSum, size, 98);
    });
  }
}

TFRING_TEST(CoordinatorInproc, CachedNameChangedOnOneRankIsAMismatch) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    for (int step = 0; step < 2; ++step) {
      job.OnEveryRank([&](int rank) {
        OpPtr p = SubmitAllreduce(job.rank(rank), "c", DataType::kFloat32, {4},
                                  TestValues(DataType::kFloat32, rank, 4, step), ReduceOp::kSum);
        ExpectAllreduced(p, ReduceOp::kSum, size, step);
      });
    }
    // Now cached everywhere; rank 0 alone changes its shape.
    job.OnEveryRank([&](int rank) {
      const int64_t n = rank == 0 ? 7 : 4;
      OpPtr p = SubmitAllreduce(job.rank(rank), "c", DataType::kFloat32, {n},
                                TestValues(DataType::kFloat32, rank, n), ReduceOp::kSum);
      ExpectFailure(p, StatusCode::kFailedPrecondition,
                    "Mismatched shapes for tensor 'c': rank 0 sent [7], rank 1 sent [4]");
      OpPtr again = SubmitAllreduce(job.rank(rank), "c", DataType::kFloat32, {4},
                                    TestValues(DataType::kFloat32, rank, 4, 5), ReduceOp::kSum);
      ExpectAllreduced(again, ReduceOp::kSum, size, 5);
    });
  }
}

TFRING_TEST(CoordinatorInproc, ScalarsAndEmptyTensors) {
  for (int size : kSizes) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      Coordinator* c = job.rank(rank);
      OpPtr scalar = SubmitAllreduce(c, "scalar", DataType::kFloat64, {},
                                     TestValues(DataType::kFloat64, rank, 1), ReduceOp::kMax);
      ExpectAllreduced(scalar, ReduceOp::kMax, size, 0);
      OpPtr empty = SubmitAllreduce(c, "empty", DataType::kInt32, {0}, {}, ReduceOp::kSum);
      ExpectAllreduced(empty, ReduceOp::kSum, size, 0);
      // Fused with non-empty neighbours.
      OpPtr a = SubmitAllreduce(c, "f/a", DataType::kInt32, {3},
                                TestValues(DataType::kInt32, rank, 3), ReduceOp::kSum);
      OpPtr e = SubmitAllreduce(c, "f/empty", DataType::kInt32, {2, 0}, {}, ReduceOp::kSum);
      OpPtr b = SubmitAllreduce(c, "f/b", DataType::kInt32, {2},
                                TestValues(DataType::kInt32, rank, 2), ReduceOp::kSum);
      for (const OpPtr& p : {a, e, b}) ExpectAllreduced(p, ReduceOp::kSum, size, 0);
      OpPtr bc = SubmitBroadcast(c, "bc/empty", DataType::kFloat32, {0, 3}, {}, 1);
      EXPECT_TRUE(WaitFor(bc).ok());
      OpPtr ag = SubmitAllgather(c, "ag/empty", DataType::kFloat32, {0, 3}, {});
      ASSERT_TRUE(WaitFor(ag).ok());
      EXPECT_TRUE(ag->output_shape == Shape({0, 3})) << ShapeToString(ag->output_shape);
    });
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
