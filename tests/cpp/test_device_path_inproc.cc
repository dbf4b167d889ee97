// The coordinator's path for GPU tensors, without a GPU: ranks as threads, and a device
// executor (StagingExecutor) over FakeDeviceMemory, i.e. host memory that the runtime must
// treat as a device's: wait for the producer's event, copy to the host, run the host
// collective, copy back. The NCCL executor itself needs a GPU: test_nccl_runtime.cc.
#include <chrono>
#include <future>
#include <memory>
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
const Placement kOnGpu0{0, nullptr};

TFRING_TEST(DevicePath, StagedAllreduceEveryOp) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    job.OnEveryRank([&](int rank) {
      int salt = 0;
      for (DataType dtype : {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16}) {
        for (ReduceOp op : kAllOps) {
          const std::string name = std::string("gpu/") + DataTypeName(dtype) + "/" + ReduceOpName(op);
          OpPtr p = SubmitAllreduce(job.rank(rank), name, dtype, {2, 5},
                                    TestValues(dtype, rank, 10, salt), op, kOnGpu0);
          ExpectAllreduced(p, op, size, salt);
          ++salt;
        }
      }
    });
    const int entries = size * 3 * 5;
    EXPECT_EQ(counters.waits.load(), entries);
    EXPECT_EQ(counters.to_host.load(), entries);
    EXPECT_EQ(counters.to_device.load(), entries);
    EXPECT_EQ(counters.unwaited_reads.load(), 0);
  }
}

TFRING_TEST(DevicePath, StagedFusedGroupOfSmallTensors) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    job.OnEveryRank([&](int rank) {
      std::vector<OpPtr> ops;
      for (int i = 0; i < 6; ++i) {
        ops.push_back(SubmitAllreduce(job.rank(rank), "fused/" + std::to_string(i),
                                      DataType::kFloat32, {i + 1},
                                      TestValues(DataType::kFloat32, rank, i + 1, i),
                                      ReduceOp::kAverage, kOnGpu0));
      }
      for (int i = 0; i < 6; ++i) ExpectAllreduced(ops[i], ReduceOp::kAverage, size, i);
    });
    EXPECT_EQ(counters.unwaited_reads.load(), 0);
  }
}

TFRING_TEST(DevicePath, StagedAllgatherUnevenAndBroadcast) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    const int root = size - 1;
    job.OnEveryRank([&](int rank) {
      OpPtr a = SubmitAllgather(job.rank(rank), "ag/a", DataType::kFloat32, {rank + 1, 2},
                                TestValues(DataType::kFloat32, rank, (rank + 1) * 2, 1), kOnGpu0);
      OpPtr b = SubmitAllgather(job.rank(rank), "ag/b", DataType::kInt32, {2 * rank, 3},
                                TestValues(DataType::kInt32, rank, 2 * rank * 3, 2), kOnGpu0);
      OpPtr c = SubmitBroadcast(job.rank(rank), "bc", DataType::kFloat64, {4},
                                TestValues(DataType::kFloat64, rank, 4, 3), root, kOnGpu0);
      std::vector<double> want_a, want_b;
      for (int r = 0; r < size; ++r) {
        auto va = TestValues(DataType::kFloat32, r, (r + 1) * 2, 1);
        auto vb = TestValues(DataType::kInt32, r, 2 * r * 3, 2);
        want_a.insert(want_a.end(), va.begin(), va.end());
        want_b.insert(want_b.end(), vb.begin(), vb.end());
      }
      for (const OpPtr& p : {a, b, c}) {
        const Status s = WaitFor(p);
        ASSERT_TRUE(s.ok()) << p->name << ": " << s.ToString();
      }
      std::string why;
      EXPECT_TRUE(AllClose(DataType::kFloat32, a->Result(), want_a, &why)) << why;
      EXPECT_TRUE(AllClose(DataType::kInt32, b->Result(), want_b, &why)) << why;
      EXPECT_TRUE(AllClose(DataType::kFloat64, c->Result(),
                           TestValues(DataType::kFloat64, root, 4, 3), &why))
          << why;
    });
    EXPECT_EQ(counters.unwaited_reads.load(), 0);
    EXPECT_EQ(counters.stream_waits.load(), 2 * size);  // after each allgather output
  }
}

// An alltoall in which rank r sends rank q the one value 100 * r + q; its output (what every
// rank sent this one) lands in *out, or allocating it fails with `allocation_error`.
std::future<Status> SubmitAlltoallOfOnes(Coordinator* c, const std::string& name, int rank,
                                         int size, Placement where,
                                         const std::string& allocation_error,
                                         std::shared_ptr<std::vector<int32_t>> out) {
  auto in = std::make_shared<std::vector<int32_t>>();
  Entry e;
  for (int q = 0; q < size; ++q) {
    e.request.splits.push_back(1);
    in->push_back(100 * rank + q);
  }
  auto done = std::make_shared<std::promise<Status>>();
  e.request.key.name = name;
  e.request.kind = CollectiveKind::kAlltoall;
  e.request.dtype = DataType::kInt32;
  e.request.shape = {size};
  e.request.on_device = where.device >= 0;
  e.device = where.device;
  e.input = in->data();
  e.set_received_splits = [](const std::vector<int64_t>&) { return Status::OK(); };
  e.allocate_output = [out, allocation_error](const Shape& shape, void** buffer) {
    if (!allocation_error.empty()) return Status::Internal(allocation_error);
    out->resize(shape[0]);
    *buffer = out->data();
    return Status::OK();
  };
  e.done = [done, in](const Status& s) { done->set_value(s); };  // keeps the input alive
  c->Enqueue(std::move(e));
  return done->get_future();
}

// An output that one rank cannot allocate once the ranks agreed to run the collective (the
// framework out of memory, on a GPU or the host): that rank still takes part, so its peers'
// op completes within seconds with the right result instead of waiting for it; its own op
// fails naming the tensor and the reason; and the job goes on.
TFRING_TEST(DevicePath, AnOutputOneRankCannotAllocateFailsThereAloneWithoutAHang) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    const int short_of_memory = size - 1;
    job.OnEveryRank([&](int rank) {
      for (const Placement& where : {kOnGpu0, Placement{}}) {
        const std::string name = where.device >= 0 ? "gathered.on.gpu" : "gathered.on.host";
        const std::string error = rank == short_of_memory ? "out of memory (injected)" : "";
        OpPtr op = SubmitAllgather(job.rank(rank), name, DataType::kFloat32, {rank + 1},
                                   TestValues(DataType::kFloat32, rank, rank + 1), where, error);
        const Status s = WaitFor(op, 5.0);  // the peers' world timeout is 20 s
        if (rank == short_of_memory) {
          EXPECT_FALSE(s.ok());
          EXPECT_CONTAINS(s.message(), "allocating the output of '" + name +
                                           "' failed on this rank");
          EXPECT_CONTAINS(s.message(), "out of memory (injected)");
        } else {
          ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
          std::vector<double> want;
          for (int r = 0; r < size; ++r) {
            const std::vector<double> v = TestValues(DataType::kFloat32, r, r + 1);
            want.insert(want.end(), v.begin(), v.end());
          }
          std::string why;
          EXPECT_TRUE(AllClose(DataType::kFloat32, op->Result(), want, &why)) << why;
        }
        OpPtr after = SubmitAllgather(job.rank(rank), name + ".after", DataType::kFloat32, {2},
                                      TestValues(DataType::kFloat32, rank, 2), where);
        const Status later = WaitFor(after, 5.0);
        EXPECT_TRUE(later.ok()) << later.ToString();
        // The same for an alltoall's output.
        auto out = std::make_shared<std::vector<int32_t>>();
        std::future<Status> a2a = SubmitAlltoallOfOnes(job.rank(rank), name + ".a2a", rank, size,
                                                       where, error, out);
        ASSERT_TRUE(a2a.wait_for(std::chrono::seconds(5)) == std::future_status::ready)
            << name << ".a2a did not finish within 5 s on rank " << rank;
        const Status exchanged = a2a.get();
        if (rank == short_of_memory) {
          EXPECT_CONTAINS(exchanged.message(), "allocating the output of '" + name + ".a2a'");
        } else {
          ASSERT_TRUE(exchanged.ok()) << exchanged.ToString();
          std::vector<int32_t> want;
          for (int r = 0; r < size; ++r) want.push_back(100 * r + rank);
          EXPECT_TRUE(*out == want) << name << ".a2a on rank " << rank;
        }
      }
    });
  }
}

// An input one rank cannot stage (its producer's kernel failed, or the copy to the host did)
// fails the group on every rank within seconds, naming that rank, the tensor and the reason,
// instead of leaving the peers in the host collective; the job goes on. A result one rank
// cannot copy back fails there alone: the collective ran, and the peers' results are whole.
TFRING_TEST(DevicePath, AStagingFailureOnOneRankFailsTheGroupEverywhereWithoutAHang) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    const int failing = size - 1;
    const std::string on_failing = "rank " + std::to_string(failing) + " could not stage";
    job.OnEveryRank([&](int rank) {
      Coordinator* c = job.rank(rank);
      FakeEvent event;
      event.failed.store(rank == failing);
      event.ready.store(rank != failing);
      OpPtr fine = SubmitAllreduce(c, "staged.fine", DataType::kFloat32, {3},
                                   TestValues(DataType::kFloat32, rank, 3), ReduceOp::kSum,
                                   kOnGpu0);
      OpPtr broken = SubmitAllreduce(c, "staged.broken", DataType::kFloat32, {3},
                                     TestValues(DataType::kFloat32, rank, 3, 1), ReduceOp::kSum,
                                     {0, &event});
      const Placement copy_in_fails{rank == failing ? kFailsCopyToHost : 0, nullptr};
      OpPtr uncopied = SubmitAllgather(c, "staged.uncopied", DataType::kFloat32, {2},
                                       TestValues(DataType::kFloat32, rank, 2, 2), copy_in_fails);
      const Status s = WaitFor(broken, 5.0);  // the peers' world timeout is 20 s
      EXPECT_FALSE(s.ok());
      EXPECT_CONTAINS(s.message(), "waiting for the producer of 'staged.broken' failed");
      EXPECT_CONTAINS(s.message(), "the producer's event reported an error (injected)");
      EXPECT_CONTAINS(s.message(), "no rank ran the collective");
      if (rank != failing) EXPECT_CONTAINS(s.message(), on_failing);
      // A tensor fused with the broken one fails with it, or ran whole without it.
      const Status f = WaitFor(fine, 5.0);
      if (f.ok()) {
        ExpectAllreduced(fine, ReduceOp::kSum, size, 0);
      } else {
        EXPECT_CONTAINS(f.message(), "staged.broken");
      }
      const Status u = WaitFor(uncopied, 5.0);
      EXPECT_FALSE(u.ok());
      EXPECT_CONTAINS(u.message(), "copying to the host the input of 'staged.uncopied' failed");
      EXPECT_CONTAINS(u.message(), "copy failed (injected)");
      if (rank != failing) EXPECT_CONTAINS(u.message(), on_failing);
      // The copy back after the collective: the failing rank's op alone fails.
      const Placement copy_out_fails{rank == failing ? kFailsCopyToDevice : 0, nullptr};
      OpPtr unreturned = SubmitAllreduce(c, "staged.unreturned", DataType::kFloat32, {2},
                                         TestValues(DataType::kFloat32, rank, 2, 4),
                                         ReduceOp::kSum, copy_out_fails);
      if (rank == failing) {
        ExpectFailure(unreturned, StatusCode::kInternal,
                      "copying back to the GPU the result of 'staged.unreturned' failed on this "
                      "rank (the other ranks' completed): copy failed (injected)");
      } else {
        ExpectAllreduced(unreturned, ReduceOp::kSum, size, 4);
      }
      OpPtr after = SubmitAllreduce(c, "staged.after", DataType::kFloat32, {4},
                                    TestValues(DataType::kFloat32, rank, 4, 3), ReduceOp::kSum,
                                    kOnGpu0);
      ExpectAllreduced(after, ReduceOp::kSum, size, 3);
    });
  }
}

// The producer writes the input after the op was submitted; the executor must wait for the
// ready event before it reads (as NCCL's stream waits for TF's event). The values catch a
// read before the write only when the executor is quick; the counters catch a read without
// the wait whatever the timing.
TFRING_TEST(DevicePath, WaitsForTheProducersEvent) {
  FakeDeviceMemory::Counters counters;
  InprocJob job(2, TestOptions(), &counters);
  job.OnEveryRank([&](int rank) {
    FakeEvent event;
    const std::vector<double> real = TestValues(DataType::kFloat32, rank, 8, 5);
    OpPtr p = SubmitAllreduce(job.rank(rank), "late", DataType::kFloat32, {8},
                              std::vector<double>(8, 1000.0), ReduceOp::kSum, {0, &event});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::vector<char> bytes = Encode(DataType::kFloat32, real);
    std::copy(bytes.begin(), bytes.end(), p->input.begin());
    event.ready.store(true, std::memory_order_release);
    ExpectAllreduced(p, ReduceOp::kSum, 2, 5);
  });
  EXPECT_EQ(counters.waits.load(), 2);  // each rank's input waited for ...
  EXPECT_EQ(counters.unwaited_reads.load(), 0);  // ... before it was read
}

TFRING_TEST(DevicePath, HostOnOneRankGpuOnAnotherIsAMismatch) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    const int odd = size - 1;
    job.OnEveryRank([&](int rank) {
      const Placement where = rank == odd ? Placement{} : kOnGpu0;
      OpPtr p = SubmitAllreduce(job.rank(rank), "where", DataType::kFloat32, {2},
                                TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum, where);
      ExpectFailure(p, StatusCode::kFailedPrecondition,
                    "Mismatched devices for tensor 'where': rank 0 sent GPU, rank " +
                        std::to_string(odd) + " sent CPU");
      // Host and GPU tensors with the same dtype and op are never fused together.
      OpPtr host = SubmitAllreduce(job.rank(rank), "h", DataType::kFloat32, {3},
                                   TestValues(DataType::kFloat32, rank, 3, 1), ReduceOp::kSum);
      OpPtr gpu = SubmitAllreduce(job.rank(rank), "g", DataType::kFloat32, {3},
                                  TestValues(DataType::kFloat32, rank, 3, 2), ReduceOp::kSum,
                                  kOnGpu0);
      ExpectAllreduced(host, ReduceOp::kSum, size, 1);
      ExpectAllreduced(gpu, ReduceOp::kSum, size, 2);
    });
  }
}

TFRING_TEST(DevicePath, WithoutADeviceExecutorGpuTensorsFailClearly) {
  InprocJob job(2, TestOptions());
  job.OnEveryRank([&](int rank) {
    OpPtr p = SubmitAllreduce(job.rank(rank), "nogpu", DataType::kFloat32, {2},
                              TestValues(DataType::kFloat32, rank, 2), ReduceOp::kSum, kOnGpu0);
    ExpectFailure(p, StatusCode::kFailedPrecondition,
                  "tensor 'nogpu' is in GPU memory, but this tfring build has no GPU path");
  });
}

}  // namespace
}  // namespace testing
}  // namespace tfring

namespace tfring {
namespace testing {
namespace {

// Reducescatter on host memory and staged from "GPU" memory: 7 rows over 2 and 3 ranks.
TFRING_TEST(DevicePath, ReducescatterHostAndStaged) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    job.OnEveryRank([&](int rank) {
      const std::vector<int64_t> rows = ReducescatterRows(7, size);
      int64_t start = 0;
      for (int r = 0; r < rank; ++r) start += rows[r];
      for (const Placement& where : {Placement{}, kOnGpu0}) {
        const std::string name = where.device < 0 ? "rs/host" : "rs/gpu";
        Entry e;
        auto in = std::make_shared<std::vector<char>>(
            Encode(DataType::kFloat32, TestValues(DataType::kFloat32, rank, 14, 4)));
        auto out = std::make_shared<std::vector<char>>(rows[rank] * 2 * sizeof(float) + 1);
        auto done = std::make_shared<std::promise<Status>>();
        auto status = done->get_future();
        e.request.key.name = name;
        e.request.kind = CollectiveKind::kReducescatter;
        e.request.reduce_op = ReduceOp::kAverage;
        e.request.shape = {7, 2};
        e.request.on_device = where.device >= 0;
        e.device = where.device;
        e.input = in->data();
        e.output = out->data();
        e.done = [done, in, out](const Status& s) { done->set_value(s); };
        job.rank(rank)->Enqueue(std::move(e));
        ASSERT_TRUE(status.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
        const Status s = status.get();
        ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
        const std::vector<double> all = ExpectedAllreduce(DataType::kFloat32, ReduceOp::kAverage,
                                                          size, 14, 4);
        const std::vector<double> want(all.begin() + start * 2,
                                       all.begin() + (start + rows[rank]) * 2);
        out->resize(rows[rank] * 2 * sizeof(float));
        std::string why;
        EXPECT_TRUE(AllClose(DataType::kFloat32, Decode(DataType::kFloat32, *out), want, &why))
            << name << ": " << why;
      }
    });
    EXPECT_EQ(counters.unwaited_reads.load(), 0);
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring

namespace tfring {
namespace testing {
namespace {

// Alltoall staged from "GPU" memory: rank q sends q + r + 1 rows of one int32 to rank r.
TFRING_TEST(DevicePath, AlltoallStaged) {
  for (int size : kSizes) {
    FakeDeviceMemory::Counters counters;
    InprocJob job(size, TestOptions(), &counters);
    job.OnEveryRank([&](int rank) {
      Entry e;
      std::vector<int32_t> in;
      for (int r = 0; r < size; ++r) {
        e.request.splits.push_back(rank + r + 1);
        for (int i = 0; i < rank + r + 1; ++i) in.push_back(100 * rank + r);
      }
      auto out = std::make_shared<std::vector<int32_t>>();
      auto received = std::make_shared<std::vector<int64_t>>();
      auto done = std::make_shared<std::promise<Status>>();
      auto status = done->get_future();
      e.request.key.name = "a2a";
      e.request.kind = CollectiveKind::kAlltoall;
      e.request.dtype = DataType::kInt32;
      e.request.shape = {static_cast<int64_t>(in.size())};
      e.request.on_device = true;
      e.device = 0;
      e.input = in.data();
      e.set_received_splits = [received](const std::vector<int64_t>& r) {
        *received = r;
        return Status::OK();
      };
      e.allocate_output = [out](const Shape& shape, void** buffer) {
        out->resize(shape[0] + 1);
        *buffer = out->data();
        out->resize(shape[0]);
        return Status::OK();
      };
      e.done = [done](const Status& s) { done->set_value(s); };
      job.rank(rank)->Enqueue(std::move(e));
      ASSERT_TRUE(status.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
      ASSERT_TRUE(status.get().ok());
      std::vector<int32_t> want;
      for (int q = 0; q < size; ++q) {
        EXPECT_EQ((*received)[q], q + rank + 1);
        for (int i = 0; i < q + rank + 1; ++i) want.push_back(100 * q + rank);
      }
      EXPECT_TRUE(*out == want) << "rank " << rank;
    });
  }
}

// This rank runs out of data (tfring.join); the future completes once every rank has.
std::future<Status> Join(Coordinator* c, int32_t* last_joined) {
  auto done = std::make_shared<std::promise<Status>>();
  Entry e;
  e.request.key.name = "tfring.join";
  e.request.kind = CollectiveKind::kJoin;
  e.request.dtype = DataType::kInt32;
  e.request.cacheable = false;
  e.output = last_joined;
  e.done = [done](const Status& s) { done->set_value(s); };
  c->Enqueue(std::move(e));
  return done->get_future();
}

// join() covers host tensors only: a GPU tensor that the others submit while a rank has
// joined fails on each of them with words that say what to do, and a host tensor still runs.
TFRING_TEST(DevicePath, GpuTensorWhileARankHasJoinedSaysWhatToDo) {
  FakeDeviceMemory::Counters counters;
  InprocJob job(3, TestOptions(), &counters);
  job.OnEveryRank([&](int rank) {
    Coordinator* c = job.rank(rank);
    int32_t last = -1;
    if (rank != 2) {
      OpPtr gpu = SubmitAllreduce(c, "grads.on.gpu", DataType::kFloat32, {4},
                                  TestValues(DataType::kFloat32, rank, 4), ReduceOp::kSum,
                                  kOnGpu0);
      ExpectFailure(gpu, StatusCode::kFailedPrecondition, "'grads.on.gpu' is in GPU memory");
      ExpectFailure(gpu, StatusCode::kFailedPrecondition, "steps_per_epoch");
      OpPtr host = SubmitAllreduce(c, "on.host", DataType::kFloat32, {4},
                                   TestValues(DataType::kFloat32, rank, 4, 1), ReduceOp::kSum);
      std::vector<double> want(4, 0.0);
      for (int r : {0, 1}) {
        const std::vector<double> v = TestValues(DataType::kFloat32, r, 4, 1);
        for (int i = 0; i < 4; ++i) want[i] += v[i];  // the joined rank adds zeros
      }
      ASSERT_TRUE(WaitFor(host).ok());
      std::string why;
      EXPECT_TRUE(AllClose(DataType::kFloat32, host->Result(), want, &why)) << why;
    }
    std::future<Status> joined = Join(c, &last);  // rank 2 at once, the others after
    ASSERT_TRUE(joined.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    EXPECT_TRUE(joined.get().ok());
  });
}

}  // namespace
}  // namespace testing
}  // namespace tfring
