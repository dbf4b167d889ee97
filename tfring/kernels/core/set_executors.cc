#include "tfring/kernels/core/set_executors.h"

#include <utility>

namespace tfring {

SetExecutorTable::SetExecutorTable(std::unique_ptr<Backend> backend, int rank, int size,
                                   std::unique_ptr<GroupExecutor> device,
                                   ProcessSetFactory make, Timeline* timeline)
    : size_(size),
      host_(std::move(backend), rank, size),
      device_(std::move(device)),
      make_(std::move(make)),
      timeline_(timeline) {
  host_.set_timeline(timeline_);
  if (device_) device_->set_timeline(timeline_);
}

Status SetExecutorTable::For(const std::vector<int32_t>& members, GroupExecutor** host,
                             GroupExecutor** device) {
  if (static_cast<int>(members.size()) == size_) {
    *host = &host_;
    *device = device_.get();
    return Status::OK();
  }
  auto it = sets_.find(members);
  if (it == sets_.end()) {
    SetExecutors made;
    made.status = make_(members, &made);
    if (made.status.ok()) {
      made.host->set_timeline(timeline_);
      if (made.device) made.device->set_timeline(timeline_);
    }
    it = sets_.emplace(members, std::move(made)).first;
  }
  TFRING_RETURN_IF_ERROR(it->second.status);
  *host = it->second.host.get();
  *device = it->second.device.get();
  return Status::OK();
}

}  // namespace tfring
