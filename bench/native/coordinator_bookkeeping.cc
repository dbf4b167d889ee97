// What the runtime's cycle costs per tensor, apart from moving data: cached allreduces of
// one float each on in-process ranks (threads; no MPI, no TensorFlow), so that nearly all of
// a round is the coordinator's own work (taking the entries, the cache bits, planning the
// fusion, finishing) and changes to it can be measured without the VM's swings in memory
// and MPI speed. Built with the native tests as build/bench/coordinator_bookkeeping:
//
//   build/bench/coordinator_bookkeeping [rounds=400] [ranks=2]
//
// Two shapes of a training step, for 1, 10, 100 and 1000 tensors:
//  - "grouped": one op of N tensors (EnqueueAll), as a grouped_allreduce;
//  - "separate": N graph ops, one tensor each, as a Keras step's gradients (the cycle waits
//    for the burst; after the first rounds it knows its size, cycle_driver.h).
// A round runs from the first submission to the last `done`, timed on every rank's thread
// (which sleeps meanwhile); the median over the rounds after 50 warm-ups is printed for the
// slowest rank, and what each tensor adds to a round, from the rounds of 100 and 1000. Names are as long as a Keras gradient's, so that hashing them costs what
// it costs in a real step.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tests/cpp/inproc_job.h"

using namespace tfring;

namespace {

constexpr int kWarmups = 50;

enum class StepShape { kGrouped, kSeparate };

// The entries of one round still to complete. The submitting thread sleeps until then, so
// that the two cores are the runtime threads' (a spinning submitter would take one).
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    if (left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_one();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return left_.load(std::memory_order_acquire) == 0; });
  }

 private:
  std::atomic<int> left_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

// Fills `e` as a kernel fills its entries (a kernel makes its tensors' names once).
void Fill(Entry& e, const SharedName& name, const float* in, float* out, Countdown* left) {
  e.request.key.name = name;
  e.request.kind = CollectiveKind::kAllreduce;
  e.request.reduce_op = ReduceOp::kSum;
  e.request.dtype = DataType::kFloat32;
  e.request.shape = {1};
  e.input = in;
  e.output = out;
  e.done = [left](const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "coordinator_bookkeeping: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    left->Done();
  };
}

// Median microseconds of one round on rank `rank`.
double RankMedian(testing::InprocJob* job, int rank, StepShape shape,
                  const std::vector<std::string>& strings, int rounds) {
  // This rank's own names, as each process's kernels hold theirs (ranks sharing them here
  // would share their reference counts too, which processes never do).
  const std::vector<SharedName> names(strings.begin(), strings.end());
  const int n = static_cast<int>(names.size());
  std::vector<float> in(n, 1.0f), out(n);
  std::vector<CacheTicket> tickets(n);  // as a kernel keeps one per tensor
  std::vector<double> times;
  for (int round = 0; round < kWarmups + rounds; ++round) {
    Countdown left(n);
    const auto start = std::chrono::steady_clock::now();
    if (shape == StepShape::kGrouped) {
      std::vector<Entry> group(n, Entry());  // as a grouped op's kernel makes them
      for (int i = 0; i < n; ++i) {
        Fill(group[i], names[i], &in[i], &out[i], &left);
        group[i].cache_ticket = &tickets[i];
      }
      job->rank(rank)->EnqueueAll(std::move(group));
    } else {
      for (int i = 0; i < n; ++i) {
        Entry e;
        Fill(e, names[i], &in[i], &out[i], &left);
        e.cache_ticket = &tickets[i];
        job->rank(rank)->Enqueue(std::move(e));
      }
    }
    left.Wait();
    if (round >= kWarmups) {
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 400;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 2;
  if (rounds < 1 || ranks < 1) {
    std::fprintf(stderr, "usage: %s [rounds>=1] [ranks>=1]\n", argv[0]);
    return 2;
  }
  std::printf("coordinator_bookkeeping: %d in-process ranks, median of %d rounds (after %d "
              "warm-ups), one float per tensor\n", ranks, rounds, kWarmups);
  std::printf("%-9s %8s %12s\n", "shape", "tensors", "round (us)");
  for (StepShape shape : {StepShape::kGrouped, StepShape::kSeparate}) {
    const char* label = shape == StepShape::kGrouped ? "grouped" : "separate";
    double hundred = 0;
    for (int n : {1, 10, 100, 1000}) {
      std::vector<std::string> names;
      for (int i = 0; i < n; ++i) {
        names.push_back("DistributedGradientTape_Allreduce/sequential/dense_" +
                        std::to_string(i) + "/kernel/grad");
      }
      // A job per case: its response cache and burst sizes start empty.
      testing::InprocJob job(ranks, testing::TestOptions());
      std::vector<double> medians(ranks);
      job.OnEveryRank([&](int rank) {
        medians[rank] = RankMedian(&job, rank, shape, names, rounds);
      });
      job.Shutdown();
      const double slowest = *std::max_element(medians.begin(), medians.end());
      std::printf("%-9s %8d %12.1f\n", label, n, slowest);
      if (n == 100) hundred = slowest;
      // Between 100 and 1000 tensors the fixed cost (wake-ups, the cycle's collectives),
      // which swings with the machine, cancels out.
      if (n == 1000) {
        std::printf("%-9s per tensor (100 to 1000): %.2f us\n", label, (slowest - hundred) / 900);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
