#include "tfring/kernels/backends/nccl/nccl_kept_world.h"

#include <mutex>
#include <set>


namespace tfring {
namespace {

struct Slot {
  std::mutex mutex;
  KeptComm kept;
  bool present = false;
  const void* owner = nullptr;  // the executor still running on it; null once it ended
  // Executors whose communicator a newer runtime took while they still existed (an abandoned
  // runtime's executor is never destroyed, so its address is never reused).
  std::set<const void*> taken_from;
  std::string last_made;
};

Slot& TheSlot() {
  static Slot* slot = new Slot();  // never destroyed: used at exit
  return *slot;
}

// Frees a communicator no executor uses.
void FreeComm(ncclComm_t comm, bool abort) {
  if (comm == nullptr) return;
  if (abort) {
    ncclCommAbort(comm);
  } else {
    ncclCommDestroy(comm);
  }
}

}  // namespace

void KeptWorld::Lease(const KeptComm& world, const void* owner) {
  Slot& s = TheSlot();
  KeptComm stale;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.present && s.owner == nullptr) stale = s.kept;
    s.kept = world;
    s.present = true;
    s.owner = owner;
  }
  FreeComm(stale.comm, /*abort=*/true);
}

void KeptWorld::MarkRevoked(const void* owner) {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.present && s.owner == owner) s.kept.revoked = true;
}

void KeptWorld::Drop(const void* owner) {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.present && s.owner == owner) {
    s.present = false;
    s.owner = nullptr;
    s.kept = KeptComm();
  }
}

bool KeptWorld::Leave(const void* owner) {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.taken_from.erase(owner) > 0) return true;
  if (s.present && s.owner == owner) {
    s.owner = nullptr;
    return true;
  }
  return false;
}

bool KeptWorld::Take(KeptComm* out) {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.present) return false;
  if (s.owner != nullptr) s.taken_from.insert(s.owner);
  *out = s.kept;
  s.present = false;
  s.owner = nullptr;
  s.kept = KeptComm();
  return true;
}

void KeptWorld::Free(bool peers_lost) {
  KeptComm kept;
  if (!Take(&kept)) return;
  // One with a lost member is aborted (a destroy could wait for it), and so is a revoked one.
  FreeComm(kept.comm, peers_lost || kept.revoked);
}

void KeptWorld::NoteMade(const std::string& how) {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.last_made = how;
}

std::string KeptWorld::LastMade() {
  Slot& s = TheSlot();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.last_made;
}

}  // namespace tfring
