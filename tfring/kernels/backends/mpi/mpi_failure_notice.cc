#include "tfring/kernels/backends/mpi/mpi_failure_notice.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/backends/mpi/mpi_failures.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// An announcement: one byte of status code, then the reason, cut to fit one receive.
constexpr int kMaxAnnouncement = 4096;
constexpr int kTag = 1;
// How long the destructor waits for this rank's announcements to be delivered: peers that
// are alive take them at once (they keep a receive posted); a dead one never will.
constexpr auto kDeliveryWait = std::chrono::seconds(1);

}  // namespace

MpiFailureNotice::MpiFailureNotice(MPI_Comm comm) : comm_(comm), inbox_(kMaxAnnouncement) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

Status MpiFailureNotice::Start() {
  TFRING_MPI_CHECK(MPI_Irecv(inbox_.data(), kMaxAnnouncement, MPI_CHAR, MPI_ANY_SOURCE, kTag,
                             comm_, &receive_));
  return Status::OK();
}

Status MpiFailureNotice::Create(MPI_Comm parent, std::unique_ptr<MpiFailureNotice>* out) {
  MPI_Comm comm;
  TFRING_MPI_CHECK(MPI_Comm_dup(parent, &comm));
  auto notice = std::make_unique<MpiFailureNotice>(comm);
  TFRING_RETURN_IF_ERROR(notice->Start());
  *out = std::move(notice);
  return Status::OK();
}

MpiFailureNotice::~MpiFailureNotice() {
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    MPI_Wait(&receive_, MPI_STATUS_IGNORE);
  }
  bool delivered = true;
  if (!sends_.empty()) {
    const auto deadline = std::chrono::steady_clock::now() + kDeliveryWait;
    int done = 0;
    while (MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done,
                       MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
           !done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    delivered = done != 0;
    if (!delivered) {
      // A peer that died never takes its copy. MPI may still read the buffer, so it stays.
      for (MPI_Request& r : sends_) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
    }
  }
  if (delivered) delete outbox_;
  MPI_Comm_free(&comm_);
}

void MpiFailureNotice::Announce(const Status& failure) {
  if (announced_ || heard_ || size_ == 1) return;
  announced_ = true;
  const std::string& m = failure.message();
  const size_t length = std::min<size_t>(m.size(), kMaxAnnouncement - 1);
  outbox_ = new std::vector<char>(length + 1);
  (*outbox_)[0] = static_cast<char>(failure.code());
  std::copy(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(length), outbox_->begin() + 1);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = MPI_Isend(outbox_->data(), static_cast<int>(outbox_->size()), MPI_CHAR, peer,
                             kTag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      // The peer is unreachable (dead): the others still hear, and it has its own timeout.
      TFRING_LOG(kWarning) << "announcing a GPU collective's failure to rank " << peer
                           << " failed: " << MpiStatus(rc, "MPI_Isend", __FILE__, __LINE__).message();
      continue;
    }
    sends_.push_back(r);
  }
}

bool MpiFailureNotice::Heard(Status* failure, int* from) {
  if (!heard_ && receive_ != MPI_REQUEST_NULL) {
    int arrived = 0;
    MPI_Status status;
    const int rc = MPI_Test(&receive_, &arrived, &status);
    if (rc == MPI_SUCCESS && arrived) {
      receive_ = MPI_REQUEST_NULL;
      int bytes = 0;
      MPI_Get_count(&status, MPI_CHAR, &bytes);
      heard_ = bytes > 0;
      heard_from_ = status.MPI_SOURCE;
      const int code = bytes > 0 ? static_cast<unsigned char>(inbox_[0]) : 0;
      heard_failure_ = Status(
          FailureCodeFromWire(code),
          "a GPU collective failed on rank " + std::to_string(heard_from_) +
              ", which told this rank why: " +
              std::string(inbox_.data() + 1, bytes > 1 ? bytes - 1 : 0));
    } else if (rc != MPI_SUCCESS) {
      // Under ULFM (mpirun --with-ft ulfm) the receive from any source reports a peer's
      // death: that peer will never finish its part of a device collective either, so this
      // rank need not wait out the peer timeout to say which rank is gone.
      const std::vector<int> dead = FailedPeers(comm_, rc);
      if (!dead.empty()) {
        heard_ = true;
        heard_from_ = dead[0];
        std::string ranks;
        for (int r : dead) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        heard_failure_ = Status::Unavailable(
            "rank" + std::string(dead.size() > 1 ? "s " : " ") + ranks +
            " died (MPI reports the process failed), so no GPU collective can finish");
      }
    }
  }
  if (heard_) {
    *failure = heard_failure_;
    *from = heard_from_;
  }
  return heard_;
}

}  // namespace tfring
