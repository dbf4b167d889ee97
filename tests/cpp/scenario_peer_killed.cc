// A rank killed outright (SIGKILL): what its peers' failure notice (core/failure_notice.h)
// makes of it. The GPU path polls that notice while it waits on the device, so this is how a
// NCCL collective learns, within moments, that a peer will never send its part.
//
//   mpirun --with-ft ulfm -np 3 build/tests/scenario_peer_killed
//
// Under ULFM the survivors live on, and their notice names the dead rank. tests/failure runs
// it (test_failures.py); it is not a suite test of its own, since its last rank dies.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"

namespace tfring {
namespace testing {
namespace {

MpiContext g_mpi;
ProcessLayout g_layout;

// Each survivor judges alone: an agreement across ranks would need the dead one.
class SurvivorsEnvironment : public Environment {
 public:
  void SetUp() override {
    const Status s = g_mpi.Initialize(WorldChoice(), &g_layout);
    if (!s.ok()) {
      std::fprintf(stderr, "scenario_peer_killed: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  // After a lost rank, Open MPI's MPI_Finalize can wait for ever (open-mpi/ompi#11404), as
  // tfring.elastic's workers know (tfring/_elastic/process_end.py): finalize under a deadline, and
  // end without it, saying so, past that.
  void TearDown() override {
    auto finalized = std::make_shared<std::atomic<bool>>(false);
    std::thread([finalized] {
      g_mpi.Finalize();
      finalized->store(true);
    }).detach();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!finalized->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!finalized->load()) {
      std::printf("rank %d: MPI_Finalize did not return within 10 s after the lost rank "
                  "(open-mpi/ompi#11404); ending without it\n", g_layout.rank);
      std::fflush(stdout);
      std::_Exit(0);
    }
  }
  bool verbose() const override { return g_layout.rank == 0; }
};
TFRING_TEST_ENVIRONMENT(SurvivorsEnvironment);

TFRING_TEST(PeerKilled, FailureNoticeNamesTheDeadRank) {
  ASSERT_TRUE(g_layout.size >= 2) << "run it with 2 ranks or more";
  std::unique_ptr<MpiFailureNotice> notice;
  ASSERT_TRUE(MpiFailureNotice::Create(g_mpi.world(), &notice).ok());
  MPI_Barrier(g_mpi.world());
  const int victim = g_layout.size - 1;
  if (g_layout.rank == victim) raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  Status heard;
  int from = -1;
  bool got = false;
  while (!(got = notice->Heard(&heard, &from)) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(got) << "rank " << g_layout.rank << " heard nothing of rank " << victim
                   << "'s death in 20 s";
  std::printf("rank %d heard after %.3f s: %s\n", g_layout.rank, seconds,
              heard.ToString().c_str());
  EXPECT_EQ(from, victim);
  EXPECT_TRUE(heard.code() == StatusCode::kUnavailable) << heard.ToString();
  EXPECT_CONTAINS(heard.message(), "rank " + std::to_string(victim) + " died");
  EXPECT_LT(seconds, 5.0);
  // Telling a dead peer fails quietly; the living ones still hear (a rank that heard does
  // not announce, so this is a no-op here: it must not block or crash either).
  notice->Announce(Status::Internal("after the death"));
}

}  // namespace
}  // namespace testing
}  // namespace tfring
