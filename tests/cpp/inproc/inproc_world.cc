#include "tests/cpp/inproc/inproc_world.h"

#include <chrono>
#include <string>

namespace tfring {
namespace {

Status Broken(int rank) {
  return Status::Unavailable("in-process world is broken: rank " + std::to_string(rank) +
                             " or a peer waited past the timeout in a collective");
}

}  // namespace

InprocWorld::InprocWorld(int size, double timeout_seconds)
    : size_(size), timeout_seconds_(timeout_seconds), deposits_(size, nullptr) {}

Status InprocWorld::BarrierLocked(std::unique_lock<std::mutex>* lock, int rank) {
  if (broken_) return Broken(rank);
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return Status::OK();
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds_));
  const bool released = cv_.wait_until(
      *lock, deadline, [&] { return generation_ != generation || broken_; });
  if (released && generation_ != generation) return Status::OK();
  broken_ = true;
  cv_.notify_all();
  return Broken(rank);
}

Status InprocWorld::Exchange(
    int rank, const void* mine,
    const std::function<void(const std::vector<const void*>& deposits)>& read) {
  std::unique_lock<std::mutex> lock(mutex_);
  deposits_[rank] = mine;
  TFRING_RETURN_IF_ERROR(BarrierLocked(&lock, rank));
  // Between the barriers nobody writes deposits_: a rank writes its next deposit only after
  // the second barrier, which every rank reaches after its read.
  lock.unlock();
  read(deposits_);
  lock.lock();
  return BarrierLocked(&lock, rank);
}

}  // namespace tfring
