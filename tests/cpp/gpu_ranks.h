// Which GPU a rank of a native GPU test or benchmark uses (header-only: the benchmarks in
// bench/native include it too).
//
// Normally one GPU per rank: local rank i on device i, and fewer GPUs than ranks on a host
// is a reason to skip. With TFRING_TEST_SHARE_GPU=1, which tools/gpu_ranks.sh sets, ranks
// share the GPUs there are (local rank i on device i % count), so that N ranks run on a
// one-GPU machine. NCCL accepts two ranks on one device only when each claims a host of its
// own (NCCL_HOSTID) and data moves through its socket transport; the launcher sets both.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

namespace tfring {
namespace testing {

inline bool RanksShareGpus() {
  const char* value = std::getenv("TFRING_TEST_SHARE_GPU");
  return value != nullptr && std::string(value) == "1";
}

// The device for local rank `local_rank` of `local_size` ranks on this host, or -1 with
// *why_not saying why there is none.
inline int TestDevice(int local_rank, int local_size, std::string* why_not) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    *why_not = "no CUDA device";
    return -1;
  }
  if (RanksShareGpus()) return local_rank % count;
  if (count < local_size) {
    *why_not = std::to_string(local_size) + " ranks on this host but only " +
               std::to_string(count) + " GPU(s); NCCL needs one GPU per rank (or run it "
               "through tools/gpu_ranks.sh, whose ranks share the GPUs)";
    return -1;
  }
  return local_rank;
}

}  // namespace testing
}  // namespace tfring
