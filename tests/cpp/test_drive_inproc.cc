// Eager callers drive the cycles (cycle_driver.h), with ranks as threads: an eager op
// completes on its caller's thread, alongside other threads' eager and graph ops; a caller
// whose peers never submit its op returns after its drive and the background thread
// carries on, to the stall error or the shutdown.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

// Submits an eager allreduce as a kernel does, with a countdown its done counts down (it
// lives as long as the callback: the op may complete after Enqueue returns). `*on_caller`
// counts those whose done ran on this thread.
OpPtr SubmitEager(Coordinator* c, const std::string& name, int rank, int salt,
                  std::atomic<int>* on_caller = nullptr) {
  const std::thread::id caller = std::this_thread::get_id();
  return SubmitAllreduce(
      [c, caller, on_caller](Entry e) {
        e.eager = true;
        auto countdown = std::make_shared<OpCountdown>(1);
        e.done = [caller, on_caller, countdown, done = std::move(e.done)](const Status& s) {
          if (on_caller && std::this_thread::get_id() == caller) on_caller->fetch_add(1);
          countdown->CountDown();
          done(s);
        };
        c->Enqueue(std::move(e), countdown.get());
      },
      name, DataType::kFloat32, {5}, TestValues(DataType::kFloat32, rank, 5, salt),
      ReduceOp::kSum);
}

TFRING_TEST(DriveInproc, EagerOpsCompleteOnTheCallersThread) {
  for (int size : {2, 3}) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      std::atomic<int> on_caller{0};
      const int calls = 200;
      for (int i = 0; i < calls; ++i) {
        OpPtr p = SubmitEager(job.rank(rank), "eager/" + std::to_string(i % 7), rank, i % 7,
                              &on_caller);
        ExpectAllreduced(p, ReduceOp::kSum, size, i % 7);
      }
      // The background thread may hold the cycle now and then (its timer); most calls
      // must complete where they were made.
      EXPECT_GE(on_caller.load(), calls / 2) << "rank " << rank << " of " << size;
    });
  }
}

TFRING_TEST(DriveInproc, EagerCallersBesideGraphOpsOnOtherThreads) {
  for (int size : {2, 3}) {
    InprocJob job(size, TestOptions());
    job.OnEveryRank([&](int rank) {
      std::vector<std::thread> threads;
      for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < 60; ++i) {
            const std::string name = "mixed/" + std::to_string(t) + "/" + std::to_string(i % 5);
            const int salt = t * 10 + i % 5;
            // Threads 0 and 1 are eager callers; thread 2 submits graph ops.
            OpPtr p = t < 2 ? SubmitEager(job.rank(rank), name, rank, salt)
                            : SubmitAllreduce(job.rank(rank), name, DataType::kFloat32, {5},
                                              TestValues(DataType::kFloat32, rank, 5, salt),
                                              ReduceOp::kSum);
            ExpectAllreduced(p, ReduceOp::kSum, size, salt);
          }
        });
      }
      for (std::thread& th : threads) th.join();
    });
  }
}

TFRING_TEST(DriveInproc, ACallerWhosePeersNeverSubmitReturnsAndShutdownFailsItsOp) {
  InprocJob job(2, TestOptions());
  OpPtr lonely;
  job.OnEveryRank([&](int rank) {
    if (rank != 0) return;
    const auto start = std::chrono::steady_clock::now();
    lonely = SubmitEager(job.rank(0), "lonely", 0, 1);
    // The drive gives up after a millisecond; the background thread then holds the op.
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(took, 1.0) << "Enqueue of an op no peer submits returned after " << took << " s";
    EXPECT_TRUE(lonely->status.wait_for(std::chrono::milliseconds(50)) ==
                std::future_status::timeout);
  });
  job.Shutdown();
  ExpectFailure(lonely, StatusCode::kAborted, "shut down");
}

TFRING_TEST(DriveInproc, AnOpHandedOverCompletesWhenItsPeerComesLate) {
  // The driver gives up and returns; the peer's op then comes, and the background thread
  // completes the caller's op, counting down the submitter's countdown. No sleep decides
  // the order: rank 1 submits only once rank 0's Enqueue has returned with its op still
  // pending (the drive gave up: the hand-over), and rank 0's thread stays alive, blocked on
  // its op without driving, so that a done that ran on it would show in `on_caller`.
  InprocJob job(2, TestOptions());
  OpPtr early;
  std::atomic<int> early_on_caller{0};
  std::mutex mu;
  std::condition_variable returned_cv;
  bool returned = false, done_at_return = false;
  job.OnEveryRank([&](int rank) {
    if (rank == 0) {
      early = SubmitEager(job.rank(0), "late/peer", 0, 3, &early_on_caller);
      {
        std::lock_guard<std::mutex> lock(mu);
        done_at_return = early->status.wait_for(std::chrono::seconds(0)) ==
                         std::future_status::ready;
        returned = true;
      }
      returned_cv.notify_all();
      early->status.wait_for(std::chrono::seconds(10));
      return;
    }
    bool saw_return;
    {
      std::unique_lock<std::mutex> lock(mu);
      saw_return = returned_cv.wait_for(lock, std::chrono::seconds(10), [&] { return returned; });
    }
    EXPECT_TRUE(saw_return) << "rank 0's Enqueue did not return while its peer had not "
                               "submitted: the drive did not give up";
    OpPtr late = SubmitEager(job.rank(1), "late/peer", 1, 3);
    ExpectAllreduced(late, ReduceOp::kSum, 2, 3);
  });
  EXPECT_FALSE(done_at_return) << "rank 0's op was complete when its Enqueue returned";
  ExpectAllreduced(early, ReduceOp::kSum, 2, 3);
  EXPECT_EQ(early_on_caller.load(), 0)
      << "rank 0's op completed on its caller's thread, which had handed it over";
  // And the job goes on: a second round of the same, named as before.
  job.OnEveryRank([&](int rank) {
    ExpectAllreduced(SubmitEager(job.rank(rank), "late/peer", rank, 4), ReduceOp::kSum, 2, 4);
  });
}

}  // namespace
}  // namespace testing
}  // namespace tfring
