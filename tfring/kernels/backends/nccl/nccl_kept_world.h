// The world communicator one runtime leaves to the next, and NCCL's calls that reshape it.
//
// An elastic reset stops the runtime and starts a new one on the ranks left (or with the ranks
// that joined). Without this, the new runtime aborts the old NCCL communicator and makes a new
// one (a unique id, then NCCL's full set-up). With it, the runtime's world communicator is
// kept in this process-wide slot when the runtime ends for a reset (GlobalRuntime::Shutdown
// for_reset; a plain shutdown() frees it) or is abandoned after a lost peer (its executor is
// never destroyed), and the next runtime keeps it as it is, shrinks it or
// grows it (core/communicator_reshape.h) where the NCCL loaded has the calls (nccl_library.h,
// ReshapeCalls: ncclCommRevoke from NCCL 2.28.7, ncclCommShrink 2.27.3, ncclCommGrow 2.29.2).
// TFRING_NCCL_RESHAPE=off leaves the slot unused: every runtime makes its own communicator.
//
// Ownership: the executor that leased the communicator uses it while it runs; once it ends
// (Leave) or its communicator is taken by a newer runtime (Take), the slot owns it. Whoever
// takes it frees it (after a shrink or grow, or when it cannot be used); Free frees one
// nobody took.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <string>

namespace tfring {

struct KeptComm {
  ncclComm_t comm = nullptr;
  int device = -1;
  int rank = -1, size = 0;
  uint64_t lineage = 0;  // core/communicator_reshape.h
  bool revoked = false;
};

class KeptWorld {
 public:
  // `world` is the running executor `owner`'s world communicator: kept once the owner ends.
  // Replaces (aborting) a communicator kept earlier and never taken.
  static void Lease(const KeptComm& world, const void* owner);
  // The owner revoked its communicator after a failure: kept, to be shrunk.
  static void MarkRevoked(const void* owner);
  // The owner aborted its communicator (or is about to): nothing is kept.
  static void Drop(const void* owner);
  // The owner ends: true if the slot holds its communicator, or a newer runtime took it.
  // The owner must not free it then.
  static bool Leave(const void* owner);
  // Hands the kept communicator over, and empties the slot.
  static bool Take(KeptComm* out);
  // Frees a kept communicator nobody took (tfring's shutdown() but for an elastic reset, and
  // at exit): aborted where a peer was lost (a destroy would wait for it).
  static void Free(bool peers_lost);
  // How the latest world communicator was made ("kept", "shrunk", "grown", "made anew"):
  // what the native scenarios and the debug log report.
  static void NoteMade(const std::string& how);
  static std::string LastMade();
};

}  // namespace tfring
