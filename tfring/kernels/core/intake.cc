#include "tfring/kernels/core/intake.h"

#include <utility>

namespace tfring {

Status NamingTensor(const Status& status, const std::string& name, int rank) {
  return Status(status.code(),
                status.message() + " (tensor '" + name + "', rank " + std::to_string(rank) + ")");
}

void Intake::Open() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = true;
  opened_ = true;
}

bool Intake::Put(std::vector<Entry>* entries) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!open_) {
    const Status closed = closed_status_;
    lock.unlock();
    for (Entry& e : *entries) {
      e.done(closed.ok() ? NotInitialized("running '" + e.request.name + "'")
                         : NamingTensor(closed, e.request.name, rank_));
    }
    return false;
  }
  // The cycle waits for a burst of graph ops to end (WaitForBurstToEnd). The entries of one
  // op with several tensors arrive here together and complete, and so does a grouped op's
  // unit (Signature::parts): they count as no burst, and the cycle takes them at once.
  if (entries->size() == 1 && !(*entries)[0].eager && (*entries)[0].request.parts.empty()) {
    graph_ops_.fetch_add(1, std::memory_order_relaxed);
  }
  const int count = static_cast<int>(entries->size());
  queue_.push_back(std::move(*entries));
  queued_.fetch_add(count, std::memory_order_release);
  return true;
}

void Intake::Take(std::vector<std::vector<Entry>>* taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  taken->swap(queue_);
  queued_.store(0, std::memory_order_relaxed);
}

std::vector<std::vector<Entry>> Intake::Close(const Status& status) {
  std::vector<std::vector<Entry>> queued;
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = false;
  closed_status_ = status;
  queued.swap(queue_);
  queued_.store(0, std::memory_order_relaxed);
  return queued;
}

bool Intake::WaitForWork(std::chrono::steady_clock::duration timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout > std::chrono::steady_clock::duration::zero()) {
    wake_.wait_for(lock, timeout,
                   [this] { return !queue_.empty() || stop_requested() || handed_over_; });
  }
  handed_over_ = false;
  return stop_requested();
}

void Intake::HandOver() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    handed_over_ = true;
  }
  wake_.notify_one();
}

void Intake::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);  // so that WaitForWork cannot miss it
    stop_requested_.store(true, std::memory_order_release);
  }
  wake_.notify_one();
}

void Intake::MarkPeerLost() {
  std::lock_guard<std::mutex> lock(mutex_);
  peer_lost_ = true;
}

bool Intake::peer_lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peer_lost_;
}

bool Intake::stopped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return opened_ && !open_;
}

}  // namespace tfring
