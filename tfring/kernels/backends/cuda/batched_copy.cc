#include "tfring/kernels/backends/cuda/batched_copy.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>

#include "tfring/kernels/backends/cuda/batched_copy_ptx.h"
#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// The kernel's parameter, as batched_copy.cu declares it (the PTX takes 1536 bytes).
constexpr int kMaxCopies = 64;
struct CopyBatch {
  const void* src[kMaxCopies];
  void* dst[kMaxCopies];
  unsigned long long bytes[kMaxCopies];
};
static_assert(sizeof(CopyBatch) == 1536, "must match tfring_batched_copy's parameter in the PTX");

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocksPerCopy = 64;  // enough to keep an H100's copies at bandwidth

// Driver API entry points, by their stable names in libcuda.so.1.
using ModuleLoadDataFn = CUresult (*)(CUmodule*, const void*);
using ModuleGetFunctionFn = CUresult (*)(CUfunction*, CUmodule, const char*);
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void**, void**);
using GetErrorStringFn = CUresult (*)(CUresult, const char**);

std::string DriverError(GetErrorStringFn describe, CUresult rc) {
  const char* text = nullptr;
  if (describe == nullptr || describe(rc, &text) != CUDA_SUCCESS || text == nullptr) {
    return "CUDA driver error " + std::to_string(static_cast<int>(rc));
  }
  return text;
}

}  // namespace

void BatchedCopier::Load(bool use_kernel) {
  function_ = launch_ = nullptr;
  if (!use_kernel) {
    fallback_reason_ = "the batched-copy kernel is turned off";
    return;
  }
  // RTLD_NOLOAD first: the CUDA runtime has opened the driver already.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) {
    fallback_reason_ = std::string("cannot open libcuda.so.1: ") + dlerror();
  } else {
    auto load = reinterpret_cast<ModuleLoadDataFn>(dlsym(driver, "cuModuleLoadData"));
    auto get = reinterpret_cast<ModuleGetFunctionFn>(dlsym(driver, "cuModuleGetFunction"));
    auto launch = reinterpret_cast<LaunchKernelFn>(dlsym(driver, "cuLaunchKernel"));
    auto describe = reinterpret_cast<GetErrorStringFn>(dlsym(driver, "cuGetErrorString"));
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    CUresult rc;
    if (load == nullptr || get == nullptr || launch == nullptr) {
      fallback_reason_ = "libcuda.so.1 lacks cuModuleLoadData, cuModuleGetFunction or cuLaunchKernel";
    } else if ((rc = load(&module, kBatchedCopyPtx)) != CUDA_SUCCESS) {
      // The module stays loaded for the life of the device's context: nothing unloads it.
      fallback_reason_ = "the driver cannot load the kernel's PTX: " + DriverError(describe, rc);
    } else if ((rc = get(&function, module, "tfring_batched_copy")) != CUDA_SUCCESS) {
      fallback_reason_ = "no tfring_batched_copy in the PTX: " + DriverError(describe, rc);
    } else {
      function_ = function;
      launch_ = reinterpret_cast<void*>(launch);
      fallback_reason_.clear();
      return;
    }
  }
  TFRING_LOG(kWarning) << "GPU fusion buffers are packed with one cudaMemcpyAsync per tensor, "
                          "which is slower for many small tensors: "
                       << fallback_reason_;
}

Status BatchedCopier::Copy(const std::vector<DeviceCopy>& copies, cudaStream_t stream) {
  std::vector<DeviceCopy> todo;
  todo.reserve(copies.size());
  for (const DeviceCopy& c : copies) {
    if (c.bytes > 0 && c.dst != c.src) todo.push_back(c);
  }
  if (function_ == nullptr || todo.size() == 1) {  // one copy: the copy engine does it best
    for (const DeviceCopy& c : todo) {
      TFRING_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream));
    }
    return Status::OK();
  }
  for (size_t first = 0; first < todo.size(); first += kMaxCopies) {
    const int count = static_cast<int>(std::min<size_t>(kMaxCopies, todo.size() - first));
    TFRING_RETURN_IF_ERROR(Launch(todo.data() + first, count, stream));
  }
  return Status::OK();
}

Status BatchedCopier::Launch(const DeviceCopy* copies, int count, cudaStream_t stream) {
  CopyBatch batch{};
  int64_t largest = 0;
  for (int i = 0; i < count; ++i) {
    batch.src[i] = copies[i].src;
    batch.dst[i] = copies[i].dst;
    batch.bytes[i] = static_cast<unsigned long long>(copies[i].bytes);
    largest = std::max(largest, copies[i].bytes);
  }
  // Enough blocks for one 16-byte word per thread of the largest copy, up to the cap.
  const int64_t words_per_block = 16 * static_cast<int64_t>(kThreads);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(
      kMaxBlocksPerCopy, std::max<int64_t>(1, (largest + words_per_block - 1) / words_per_block)));
  void* params[] = {&batch};
  const CUresult rc = reinterpret_cast<LaunchKernelFn>(launch_)(
      static_cast<CUfunction>(function_), blocks, static_cast<unsigned>(count), 1, kThreads, 1, 1,
      0, static_cast<CUstream>(stream), params, nullptr);
  if (rc != CUDA_SUCCESS) {
    return Status::Internal("launching tfring's batched device copy failed: CUDA driver error " +
                            std::to_string(static_cast<int>(rc)));
  }
  return Status::OK();
}

}  // namespace tfring
