// Collectives on device buffers for the native GPU tests (GPU builds only): each input is
// written on a "producer" stream and handed over with an event, as TensorFlow's kernels
// hand theirs over, and each output is copied back to the host when the op is done, so the
// helpers of collective_util.h check it like a host op's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"

namespace tfring {
namespace testing {

// Where a rank's device ops run: its GPU, the stream its "producer" writes inputs on, and
// its place in the job (reducescatter outputs depend on it).
struct GpuPlace {
  int device = -1;
  cudaStream_t producer = nullptr;
  int rank = 0;
  int size = 1;
};

struct GpuRequest {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  double prescale = 1.0, postscale = 1.0;
  // Allgather: allocating the output fails with kInjectedAllocationFailure, as an out of
  // memory GPU would make it fail after the ranks agreed to run the op.
  bool fail_allocation = false;
};
inline constexpr char kInjectedAllocationFailure[] = "allocating the output failed (injected)";

// cudaMalloc, or the job aborted (DieInSetup): nothing can be tested past it.
void* DeviceAlloc(int64_t bytes);

// Submits one collective of `values` (as `dtype`), or of `input` bytes already in `dtype`.
OpPtr SubmitOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                  DataType dtype, const Shape& shape, const std::vector<double>& values,
                  GpuRequest how);
OpPtr SubmitBytesOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                       DataType dtype, const Shape& shape, std::vector<char> input,
                       GpuRequest how);

// An alltoall of `input` rows (`row` elements each, int32) sending splits[q] rows to rank q;
// *received gets the rows that came from each rank once the op is done.
OpPtr SubmitAlltoallOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                          const std::vector<int32_t>& input, int64_t row,
                          const std::vector<int64_t>& splits,
                          std::shared_ptr<std::vector<int64_t>> received);

}  // namespace testing
}  // namespace tfring
