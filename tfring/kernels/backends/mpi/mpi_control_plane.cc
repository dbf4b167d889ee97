#include "tfring/kernels/backends/mpi/mpi_control_plane.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/backends/mpi/mpi_failures.h"
#include "tfring/kernels/core/message.h"

namespace tfring {
namespace {
// Peers usually arrive within microseconds (every rank wakes when its own op is enqueued),
// so poll hard at first, then yield the core, then sleep with growing pauses: a rank that
// waits for a busy peer must not take CPU from the TensorFlow threads beside it. Yielding
// gives the core to any of them that can run, so while the job is active (SetActive) a
// rank yields for longer: a peer that answers while this rank sleeps waits for it too (a
// nonblocking collective progresses only while both poll), and on a Keras step whose
// ranks finish their gradients a millisecond or two apart, those late wake-ups lengthen
// every step (docs/benchmarks.md). An idle job's cycles (every cycle time, out of
// phase between ranks) still sleep early, so that it does not spin.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kSpinYield = std::chrono::microseconds(300);
constexpr auto kSpinYieldActive = std::chrono::milliseconds(20);
constexpr auto kMaxSleep = std::chrono::microseconds(200);
}  // namespace

MpiControlPlane::MpiControlPlane(MPI_Comm comm, double peer_timeout_seconds)
    : comm_(comm), peer_timeout_seconds_(peer_timeout_seconds) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiControlPlane::~MpiControlPlane() {
  if (!broken_) MPI_Comm_free(&comm_);
}

Status MpiControlPlane::Wait(MPI_Request* request, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto sleep = std::chrono::microseconds(5);
  while (true) {
    int done = 0;
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      const std::vector<int> failed = FailedPeers(comm_, rc);
      if (!failed.empty()) {
        return Status::Unavailable(
            "rank " + std::to_string(rank_) + " lost its peer " +
            (failed.size() == 1 ? "rank " + std::to_string(failed[0])
                                : "ranks " + RankListString(failed)) +
            " in " + what + ": MPI reports that process failed. tfring "
            "has stopped; only tfring.elastic.run can go on without it (a reset).");
      }
      return MpiStatus(rc, what, __FILE__, __LINE__);
    }
    if (done) {
      peers_seen_ = true;
      return Status::OK();
    }
    const auto waited = Clock::now() - start;
    if (peers_seen_ && peer_timeout_seconds_ > 0 &&
        std::chrono::duration<double>(waited).count() > peer_timeout_seconds_) {
      broken_ = true;
      return Status::Unavailable(
          "rank " + std::to_string(rank_) + " got no answer from its peer ranks for " +
          std::to_string(static_cast<int>(peer_timeout_seconds_)) +
          " s (TFRING_PEER_TIMEOUT_SECONDS) in " + what +
          ": a peer process has died or hung. tfring has stopped; this job cannot continue.");
    }
    if (waited < kSpin) continue;
    if (waited < (active_ ? kSpinYieldActive : kSpinYield)) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min<std::chrono::microseconds>(sleep * 2, kMaxSleep);
  }
}

Status MpiControlPlane::AllreduceAnd(std::vector<uint64_t>* words) {
  MPI_Request req;
  TFRING_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, words->data(), static_cast<int>(words->size()),
                                  MPI_UINT64_T, MPI_BAND, comm_, &req));
  return Wait(&req, "the control-plane allreduce");
}

Status MpiControlPlane::GatherToRoot(const std::string& mine, std::vector<std::string>* all) {
  int my_len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0);
  MPI_Request req;
  TFRING_MPI_CHECK(MPI_Igather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_, &req));
  TFRING_RETURN_IF_ERROR(Wait(&req, "the control-plane gather"));
  std::vector<int> displs(lens.size(), 0);
  std::string joined;
  if (rank_ == 0) {
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    joined.resize(total);
  }
  TFRING_MPI_CHECK(MPI_Igatherv(mine.data(), my_len, MPI_BYTE, &joined[0], lens.data(),
                                displs.data(), MPI_BYTE, 0, comm_, &req));
  TFRING_RETURN_IF_ERROR(Wait(&req, "the control-plane gather"));
  if (rank_ == 0) {
    all->resize(size_);
    for (int r = 0; r < size_; ++r) (*all)[r] = joined.substr(displs[r], lens[r]);
  }
  return Status::OK();
}

Status MpiControlPlane::BroadcastFromRoot(std::string* bytes) {
  int64_t len = static_cast<int64_t>(bytes->size());
  MPI_Request req;
  TFRING_MPI_CHECK(MPI_Ibcast(&len, 1, MPI_INT64_T, 0, comm_, &req));
  TFRING_RETURN_IF_ERROR(Wait(&req, "the control-plane broadcast"));
  bytes->resize(len);
  if (len == 0) return Status::OK();
  TFRING_MPI_CHECK(MPI_Ibcast(&(*bytes)[0], static_cast<int>(len), MPI_BYTE, 0, comm_, &req));
  return Wait(&req, "the control-plane broadcast");
}

}  // namespace tfring
