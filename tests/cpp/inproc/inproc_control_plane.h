// ControlPlane over an InprocWorld: the coordinator's small messages between ranks that are
// threads of one process. See core/control_plane.h for the calling contract (one
// coordinator thread per rank, same calls in the same order on every rank).
#pragma once

#include <memory>

#include "tests/cpp/inproc/inproc_world.h"
#include "tfring/kernels/core/control_plane.h"

namespace tfring {

class InprocControlPlane : public ControlPlane {
 public:
  // Shares `world` with the other ranks' control planes; `rank` in [0, world->size()).
  InprocControlPlane(std::shared_ptr<InprocWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  Status AllreduceAnd(std::vector<uint64_t>* words) override;
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override;
  Status BroadcastFromRoot(std::string* bytes) override;

 private:
  std::shared_ptr<InprocWorld> world_;
  int rank_;
};

}  // namespace tfring
