#include "tests/cpp/inproc/inproc_control_plane.h"

#include <utility>

namespace tfring {

InprocControlPlane::InprocControlPlane(std::shared_ptr<InprocWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {}

Status InprocControlPlane::AllreduceAnd(std::vector<uint64_t>* words) {
  // Peers read `*words` during the exchange, so the result is written only after it.
  std::vector<uint64_t> result = *words;
  TFRING_RETURN_IF_ERROR(world_->Exchange(rank_, words, [&](const std::vector<const void*>& all) {
    for (const void* p : all) {
      const auto& theirs = *static_cast<const std::vector<uint64_t>*>(p);
      for (size_t i = 0; i < result.size(); ++i) result[i] &= theirs[i];
    }
  }));
  *words = std::move(result);
  return Status::OK();
}

Status InprocControlPlane::GatherToRoot(const std::string& mine, std::vector<std::string>* all) {
  return world_->Exchange(rank_, &mine, [&](const std::vector<const void*>& deposits) {
    if (rank_ != 0) return;
    all->clear();
    for (const void* p : deposits) all->push_back(*static_cast<const std::string*>(p));
  });
}

Status InprocControlPlane::BroadcastFromRoot(std::string* bytes) {
  std::string received;
  TFRING_RETURN_IF_ERROR(world_->Exchange(rank_, bytes, [&](const std::vector<const void*>& all) {
    if (rank_ != 0) received = *static_cast<const std::string*>(all[0]);
  }));
  if (rank_ != 0) *bytes = std::move(received);
  return Status::OK();
}

}  // namespace tfring
