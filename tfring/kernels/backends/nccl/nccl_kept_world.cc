#include "tfring/kernels/backends/nccl/nccl_kept_world.h"

#include <dlfcn.h>

#include <mutex>
#include <set>
#include <type_traits>

#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// The first releases with each call as documented (earlier ones may have had the symbol
// under development).
constexpr int kRevokeSince = 22807;  // 2.28.7
constexpr int kShrinkSince = 22703;  // 2.27.3
constexpr int kGrowSince = 22902;    // 2.29.2

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

// The calls are looked up at run time, so the compiler never sees them called: where the
// headers built against declare them, their types must be the ones NcclReshapeCalls holds.
#if NCCL_VERSION_CODE >= 22807  // kRevokeSince (the preprocessor knows no constexpr)
static_assert(std::is_same<decltype(&ncclCommRevoke), decltype(NcclReshapeCalls::revoke)>::value,
              "ncclCommRevoke's type");
#endif
#if NCCL_VERSION_CODE >= 22703  // kShrinkSince
static_assert(std::is_same<decltype(&ncclCommShrink), decltype(NcclReshapeCalls::shrink)>::value,
              "ncclCommShrink's type");
static_assert(NCCL_SHRINK_DEFAULT == kNcclShrinkDefault && NCCL_SHRINK_ABORT == kNcclShrinkAbort,
              "ncclCommShrink's flags");
#endif
#if NCCL_VERSION_CODE >= 22902  // kGrowSince
static_assert(std::is_same<decltype(&ncclCommGrow), decltype(NcclReshapeCalls::grow)>::value,
              "ncclCommGrow's type");
static_assert(std::is_same<decltype(&ncclCommGetUniqueId),
                           decltype(NcclReshapeCalls::unique_id_for_grow)>::value,
              "ncclCommGetUniqueId's type");
#endif

template <typename Fn>
void Find(void* library, const char* name, int version, int since, Fn* fn) {
  *fn = version >= since ? reinterpret_cast<Fn>(dlsym(library, name)) : nullptr;
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

const NcclReshapeCalls& ReshapeCalls() {
  static const NcclReshapeCalls calls = [] {
    NcclReshapeCalls c;
    if (ncclGetVersion(&c.version) != ncclSuccess) return c;
    // The library this process loaded NCCL from (tfring's library links it; TensorFlow may
    // have loaded it first): its symbols are not global, so open it by name, already loaded.
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 ||
        info.dli_fname == nullptr) {
      return c;
    }
    void* library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (library == nullptr) return c;
    Find(library, "ncclCommRevoke", c.version, kRevokeSince, &c.revoke);
    Find(library, "ncclCommShrink", c.version, kShrinkSince, &c.shrink);
    Find(library, "ncclCommGetUniqueId", c.version, kGrowSince, &c.unique_id_for_grow);
    Find(library, "ncclCommGrow", c.version, kGrowSince, &c.grow);
    if (c.unique_id_for_grow == nullptr) c.grow = nullptr;  // a grow needs both
    TFRING_LOG(kDebug) << "NCCL " << c.version << ": revoke " << (c.revoke ? "yes" : "no")
                       << ", shrink " << (c.shrink ? "yes" : "no") << ", grow "
                       << (c.grow ? "yes" : "no");
    return c;
  }();
  return calls;
}

}  // namespace tfring
