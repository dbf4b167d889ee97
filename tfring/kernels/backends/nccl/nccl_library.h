// The NCCL tfring's calls go to: the file tfring's build found (TFRING_NCCL_FILE, compiled
// in), or the one TFRING_NCCL_LIBRARY names, opened by tfring itself, as the CUDA runtime is
// (backends/cuda/cuda_runtime_library.h says why): tfring defines the NCCL calls it makes
// (nccl_calls.h) as hidden functions that call through a table looked up in that file.
//
// One NCCL per process: where a libnccl.so.2 is already loaded (TensorFlow's GPU build opens
// one for its own collectives), tfring uses that one if it is the same file or the NCCL
// version tfring was built against, and otherwise refuses it: every NCCL call fails, and the
// report's error names both files and versions. A NCCL that TensorFlow opens after tfring's
// is tfring's (the dynamic loader matches libnccl.so.2 by name).
#pragma once

#include <nccl.h>

#include "tfring/kernels/common/shared_library.h"

namespace tfring {

// NCCL's fault-tolerance calls where the NCCL loaded has them (null otherwise).
struct NcclReshapeCalls {
  ncclResult_t (*revoke)(ncclComm_t, int) = nullptr;
  ncclResult_t (*shrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) = nullptr;
  ncclResult_t (*unique_id_for_grow)(ncclComm_t, ncclUniqueId*) = nullptr;
  ncclResult_t (*grow)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*,
                       ncclConfig_t*) = nullptr;
  int version = 0;  // ncclGetVersion's
};

// Loads NCCL on the first call; what was loaded, or why nothing was.
const LoadedLibraryReport& NcclReport();
const NcclReshapeCalls& ReshapeCalls();

// ncclCommShrink's flags (nccl.h from 2.27 on; spelled here for older headers).
constexpr int kNcclShrinkDefault = 0;  // the parent is idle or revoked
constexpr int kNcclShrinkAbort = 1;    // stop the parent's work first

}  // namespace tfring
