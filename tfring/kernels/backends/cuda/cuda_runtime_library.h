// The CUDA runtime tfring's calls go to: the file tfring's build found (TFRING_CUDA_RUNTIME_
// FILE, compiled in), or the one TFRING_CUDA_RUNTIME_LIBRARY names, opened by tfring itself.
//
// tfring defines the CUDA runtime calls it makes (backends/cuda/cuda_runtime_calls.h) as
// hidden functions of its own library that call through a table looked up in that file, and
// links no libcudart. So no other library's exported entry points can take their place:
// TensorFlow's GPU build exports trampolines under the same names, loaded RTLD_GLOBAL ahead
// of tfring, which would otherwise receive every call (docs/gpu.md, 'Which NCCL and CUDA
// runtime run'). The file is opened at the first call; a file that cannot be opened makes
// every call fail with cudaErrorSharedObjectInitFailed, whose message names the file.
#pragma once

#include "tfring/kernels/common/shared_library.h"

namespace tfring {

// Loads the CUDA runtime on the first call; what was loaded, or why nothing was.
const LoadedLibraryReport& CudaRuntimeReport();

}  // namespace tfring
