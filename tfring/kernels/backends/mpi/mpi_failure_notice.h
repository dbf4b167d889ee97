// MpiFailureNotice: FailureNotice (core/failure_notice.h) over a communicator of its own.
//
// Each rank keeps one receive posted for an announcement from any peer, so an announcement
// lands without the receiver calling anything but MPI_Test while it waits on its device.
// Announcing is one small non-blocking send to each peer. The communicator returns errors
// instead of aborting the job: a peer that died cannot make an announcement fail the others.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/core/failure_notice.h"

namespace tfring {

class MpiFailureNotice : public FailureNotice {
 public:
  // Takes ownership of `comm` (a duplicate for this alone: announcements must not match
  // any other receive).
  explicit MpiFailureNotice(MPI_Comm comm);
  ~MpiFailureNotice() override;
  Status Start();  // posts the receive; call once, on every rank of the communicator
  // A started notice over a duplicate of `parent` (collective over its ranks).
  static Status Create(MPI_Comm parent, std::unique_ptr<MpiFailureNotice>* out);

  void Announce(const Status& failure) override;
  bool Heard(Status* failure, int* from) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<char> inbox_;
  std::vector<char>* outbox_ = nullptr;  // leaked if a send never completes (see destructor)
  MPI_Request receive_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  bool heard_ = false, announced_ = false;
  Status heard_failure_;
  int heard_from_ = -1;
};

}  // namespace tfring
