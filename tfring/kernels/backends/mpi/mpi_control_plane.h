// ControlPlane over MPI: nonblocking collectives on tfring's own communicator, completed by
// polling (a short spin, then yields, then sleeps backing off to 200 us), so that
//  - a rank waiting for slower peers does not burn a core that TensorFlow needs (while the
//    job is active, it yields for longer before it sleeps: SetActive), and
//  - a peer that stops answering is noticed: once the first cycle has completed (all ranks
//    are up), a wait longer than TFRING_PEER_TIMEOUT_SECONDS fails with kUnavailable instead
//    of hanging. Before that, ranks may still be importing TensorFlow, so there is no limit.
#pragma once

#include <mpi.h>

#include "tfring/kernels/core/control_plane.h"

namespace tfring {

class MpiControlPlane : public ControlPlane {
 public:
  // Takes ownership of `comm` (freed in the destructor unless the peers are lost).
  MpiControlPlane(MPI_Comm comm, double peer_timeout_seconds);
  ~MpiControlPlane() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void SetActive(bool active) override { active_ = active; }
  Status AllreduceAnd(std::vector<uint64_t>* words) override;
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override;
  Status BroadcastFromRoot(std::string* bytes) override;

 private:
  Status Wait(MPI_Request* request, const char* what);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double peer_timeout_seconds_;
  bool peers_seen_ = false;  // a collective has completed: every rank is up
  bool broken_ = false;
  bool active_ = false;
};

}  // namespace tfring
