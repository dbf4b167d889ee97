// The global runtime (runtime/global_runtime.h) as the TF kernels and the C API use it:
// Init, Enqueue from many threads, Shutdown, Init again. Run under mpirun at 2 and 3 ranks.
//
// The race this guards: Enqueue takes the coordinator under the runtime's lock and calls it
// after releasing the lock, while another thread (a user's shutdown(), an atexit during an
// op) shuts the runtime down. Every entry must complete exactly once, with a result or an
// error, and nothing may touch a destroyed coordinator (a sanitizer build reports it).
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/runtime/global_runtime.h"

namespace tfring {
namespace testing {
namespace {

GlobalRuntime& Runtime() { return GlobalRuntime::Get(); }

void InitOrDie() {
  const Status s = Runtime().Init();
  if (!s.ok()) {
    std::fprintf(stderr, "test_mpi_global_runtime: init failed: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

class GlobalRuntimeEnvironment : public Environment {
 public:
  void SetUp() override { InitOrDie(); }
  void TearDown() override { Runtime().AtExit(); }
  bool verbose() const override { return Runtime().layout().rank == 0; }
  bool FailedAnywhere(bool failed_here) override {
    int mine = failed_here ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any != 0;
  }
};
TFRING_TEST_ENVIRONMENT(GlobalRuntimeEnvironment);

const EnqueueFn kEnqueue = [](Entry e) { Runtime().Enqueue(std::move(e)); };

TFRING_TEST(GlobalRuntime, EnqueueRacingShutdownCompletesEveryEntryOnce) {
  const int rank = Runtime().layout().rank;
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  constexpr int kPerThread = 200;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) InitOrDie();  // every rank, in step: Init is collective
    std::atomic<bool> stop{false};
    std::mutex ops_mutex;
    std::vector<OpPtr> ops;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        // At most kPerThread entries a round: every one of them is negotiated.
        for (int i = 0; !stop.load() && i < kPerThread; ++i) {
          // Names differ per rank too, so nothing pairs: each entry waits until shutdown
          // fails it, or fails at once when it comes after.
          const std::string name = "race." + std::to_string(round) + "." + std::to_string(rank) +
                                   "." + std::to_string(t) + "." + std::to_string(i);
          OpPtr op = SubmitAllreduce(kEnqueue, name, DataType::kFloat32, {1}, {1.0},
                                     ReduceOp::kSum);
          std::lock_guard<std::mutex> lock(ops_mutex);
          ops.push_back(op);
        }
      });
    }
    // Shut down while the threads are enqueueing (each has begun), at a different moment
    // each round.
    while (true) {
      std::lock_guard<std::mutex> lock(ops_mutex);
      if (ops.size() >= static_cast<size_t>(kThreads)) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 5)));
    Runtime().Shutdown();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    stop = true;
    for (std::thread& thread : threads) thread.join();
    ASSERT_TRUE(!Runtime().initialized());
    // Every entry completes (none past the deadline), and fails: none could pair. One that
    // completed twice would have set its promise twice, which throws and ends the test.
    for (const OpPtr& op : ops) {
      const Status s = WaitFor(op, 20.0);
      ASSERT_TRUE(s.code() != StatusCode::kDeadlineExceeded)
          << op->name << " never completed after shutdown (round " << round << ")";
      EXPECT_TRUE(!s.ok()) << op->name << ": an unpaired entry cannot succeed";
    }
  }
  // The runtime starts again and works: a collective every rank makes.
  InitOrDie();
  const int size = Runtime().layout().size;
  OpPtr sum = SubmitAllreduce(kEnqueue, "after.race", DataType::kFloat64, {3},
                              TestValues(DataType::kFloat64, rank, 3), ReduceOp::kSum);
  ExpectAllreduced(sum, ReduceOp::kSum, size, 0);
}

TFRING_TEST(GlobalRuntime, EnqueueBeforeInitFailsNamingTheTensor) {
  Runtime().Shutdown();
  OpPtr op = SubmitAllreduce(kEnqueue, "too.early", DataType::kFloat32, {1}, {1.0},
                             ReduceOp::kSum);
  const Status s = WaitFor(op, 5.0);
  EXPECT_TRUE(s.code() == StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_CONTAINS(s.message(), "'too.early'");
  InitOrDie();
}

}  // namespace
}  // namespace testing
}  // namespace tfring
