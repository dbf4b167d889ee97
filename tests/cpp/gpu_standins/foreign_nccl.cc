// A stand-in for an NCCL that another library loaded before tfring (TensorFlow's, say), for
// the one-NCCL rule (backends/nccl/nccl_library.h) in tests/unit/test_gpu_bindings.py. Its
// SONAME is libnccl.so.2; ncclGetVersion reports TFRING_TEST_FOREIGN_NCCL_VERSION, or the
// version of the headers tfring was built against. Any other call aborts: the test only asks
// which NCCL tfring would use.
#include <cstdio>
#include <cstdlib>

#include "tfring/kernels/backends/nccl/nccl_calls.h"

namespace {

[[noreturn]] void Trap(const char* name) {
  std::fprintf(stderr, "FOREIGN NCCL CALLED: %s\n", name);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

// Every call of the table but ncclGetVersion (renamed out of the way while the table is
// expanded) traps.
#define TFRING_STANDIN_TRAP(ret, name, params, args) \
  extern "C" ret name params { Trap(#name); }
#define ncclGetVersion tfring_standin_unused_get_version
TFRING_NCCL_CALLS(TFRING_STANDIN_TRAP)
#undef ncclGetVersion

extern "C" ncclResult_t ncclGetVersion(int* version) {
  const char* setting = std::getenv("TFRING_TEST_FOREIGN_NCCL_VERSION");
  *version = setting != nullptr ? std::atoi(setting) : NCCL_VERSION_CODE;
  return ncclSuccess;
}
