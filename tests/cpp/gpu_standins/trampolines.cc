// A stand-in for TensorFlow's GPU build in the bindings test (tests/unit/test_gpu_bindings.py):
// like libtensorflow_framework.so.2 there, it exports entry points under every NCCL and CUDA
// runtime name tfring calls, and the test loads it RTLD_GLOBAL before tfring. A call that
// reaches one of them went around the library tfring chose: it says which and aborts.
#include <cstdio>
#include <cstdlib>

#include "tfring/kernels/backends/cuda/cuda_runtime_calls.h"
#include "tfring/kernels/backends/nccl/nccl_calls.h"

namespace {

[[noreturn]] void Trap(const char* name) {
  std::fprintf(stderr, "TRAMPOLINE CALLED: %s reached the stand-in for TensorFlow's "
               "trampolines, not the library tfring chose\n", name);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

#define TFRING_STANDIN_TRAP(ret, name, params, args) \
  extern "C" ret name params { Trap(#name); }
TFRING_NCCL_CALLS(TFRING_STANDIN_TRAP)
TFRING_CUDA_RUNTIME_CALLS(TFRING_STANDIN_TRAP)
