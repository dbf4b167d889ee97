// The host GPU's CUDA runtime (host_gpu.h): devices, memory, streams and events, and the
// driver calls that load and launch tfring's batched-copy kernel.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/cpp/host_gpu/host_gpu.h"

namespace host_gpu {
namespace {

thread_local int current_device = 0;

int DeviceCount() {
  const char* text = std::getenv("TFRING_HOST_GPU_COUNT");
  return text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 1;
}

// What cudaMalloc may hand out in all (TFRING_HOST_GPU_MEMORY_BYTES, default 4 GiB): past
// it, cudaErrorMemoryAllocation, as a full GPU.
size_t MemoryLimit() {
  const char* text = std::getenv("TFRING_HOST_GPU_MEMORY_BYTES");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : (size_t{4} << 30);
}

struct Memory {
  std::mutex mu;
  std::map<void*, size_t> allocations;
  size_t in_use = 0;
};
Memory& TheMemory() {
  static Memory* m = new Memory;  // never destroyed: streams may outlive static destruction
  return *m;
}

struct Streams {
  std::mutex mu;
  std::set<CUstream_st*> live;
};
Streams& TheStreams() {
  static Streams* s = new Streams;
  return *s;
}

void Work(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  while (true) {
    s->cv.wait(lock, [s] { return !s->tasks.empty() || s->closing; });
    if (s->tasks.empty()) break;  // closing, and nothing left
    std::function<void()> task = std::move(s->tasks.front());
    s->tasks.pop_front();
    s->busy = true;
    lock.unlock();
    task();
    lock.lock();
    s->busy = false;
    s->cv.notify_all();
  }
  // Destroyed by the application, its work done. The stream itself is never freed: a
  // DrainAll that listed it may still look at it (a few bytes per stream, in tests).
}

void Drain(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [s] { return s->tasks.empty() && !s->busy; });
}

// cudaFree synchronizes with the device: every stream's queued work first.
void DrainAll() {
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(TheStreams().mu);
    streams.assign(TheStreams().live.begin(), TheStreams().live.end());
  }
  for (CUstream_st* s : streams) Drain(s);
}

bool Live(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(TheStreams().mu);
  return TheStreams().live.count(s) > 0;
}

}  // namespace

void Enqueue(CUstream_st* stream, std::function<void()> task) {
  if (stream == nullptr) {
    task();
    return;
  }
  std::lock_guard<std::mutex> lock(stream->mu);
  stream->tasks.push_back(std::move(task));
  stream->cv.notify_all();
}

bool IsDeviceMemory(const void* p, size_t bytes) {
  auto& m = TheMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.allocations.upper_bound(const_cast<void*>(p));
  if (it == m.allocations.begin()) return false;
  --it;
  const char* start = static_cast<const char*>(it->first);
  const char* at = static_cast<const char*>(p);
  return at >= start && at + bytes <= start + std::max<size_t>(it->second, 1);
}

namespace {

struct Injected {
  std::mutex mu;
  std::string call;
  int error = 0;
  std::thread::id armed_by;
};

Injected& TheInjected() {
  static Injected* injected = new Injected();  // never destroyed: used at exit
  return *injected;
}

}  // namespace

int TakeInjected(const char* call) {
  Injected& i = TheInjected();
  std::lock_guard<std::mutex> lock(i.mu);
  if (i.error == 0 || i.call != call || std::this_thread::get_id() == i.armed_by) return 0;
  const int error = i.error;
  i.error = 0;
  return error;
}

}  // namespace host_gpu

extern "C" void tfring_host_gpu_fail_next(const char* call, int error) {
  host_gpu::Injected& i = host_gpu::TheInjected();
  std::lock_guard<std::mutex> lock(i.mu);
  i.call = call;
  i.error = error;
  i.armed_by = std::this_thread::get_id();
}

using host_gpu::Enqueue;

extern "C" {

// The headers' version, as a runtime and driver of that release would report it.
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// Every failing call returns its error; none is left pending.
cudaError_t cudaGetLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = host_gpu::DeviceCount();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= host_gpu::DeviceCount()) return cudaErrorInvalidDevice;
  host_gpu::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= host_gpu::DeviceCount()) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "tfring host GPU %d", device);
  prop->totalGlobalMem = host_gpu::MemoryLimit();
  prop->multiProcessorCount = 1;
  prop->major = 9;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (device < 0 || device >= host_gpu::DeviceCount()) return cudaErrorInvalidDevice;
  std::snprintf(pciBusId, len, "00000000:%02X:00.0", device + 1);
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (const int injected = host_gpu::TakeInjected("cudaMalloc")) {
    return static_cast<cudaError_t>(injected);
  }
  auto& m = host_gpu::TheMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.in_use + size > host_gpu::MemoryLimit()) return cudaErrorMemoryAllocation;
  // 256-byte aligned, as cudaMalloc's; never 0 bytes, so that every pointer is distinct.
  void* p = std::aligned_alloc(256, std::max<size_t>(256, (size + 255) / 256 * 256));
  if (p == nullptr) return cudaErrorMemoryAllocation;
  m.allocations[p] = size;
  m.in_use += size;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  host_gpu::DrainAll();
  auto& m = host_gpu::TheMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.allocations.find(devPtr);
  if (it == m.allocations.end()) return cudaErrorInvalidValue;  // not cudaMalloc's
  m.in_use -= it->second;
  m.allocations.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  auto* s = new CUstream_st;
  s->device = host_gpu::current_device;
  {
    std::lock_guard<std::mutex> lock(host_gpu::TheStreams().mu);
    host_gpu::TheStreams().live.insert(s);
  }
  std::thread(host_gpu::Work, s).detach();
  *pStream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!host_gpu::Live(stream)) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> lock(host_gpu::TheStreams().mu);
    host_gpu::TheStreams().live.erase(stream);
  }
  // As CUDA's: returns at once; the stream's queued work still runs, then it is freed.
  std::lock_guard<std::mutex> lock(stream->mu);
  stream->closing = true;
  stream->cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream == nullptr) {
    host_gpu::DrainAll();
  } else {
    if (!host_gpu::Live(stream)) return cudaErrorInvalidResourceHandle;
    host_gpu::Drain(stream);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (stream != nullptr && !host_gpu::Live(stream)) return cudaErrorInvalidResourceHandle;
  if (host_gpu::IsDeviceMemory(dst, count) && host_gpu::IsDeviceMemory(src, count)) {
    Enqueue(stream, [dst, src, count] { std::memmove(dst, src, count); });
    return cudaSuccess;
  }
  // Host buffers are pageable here (nothing is pinned), and CUDA's "API synchronization
  // behavior" says: from pageable memory, the data is staged at once and written in stream
  // order; into pageable memory, the call returns only once the copy is done, so it waits
  // for the stream's earlier work (a collective waiting on a peer, say) without returning.
  if (host_gpu::IsDeviceMemory(dst, count)) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + count);
    Enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  if (stream != nullptr) host_gpu::Drain(stream);
  std::memmove(dst, src, count);
  return cudaSuccess;
}

// cudaMemcpy and cudaMemset run on the legacy default stream, which does not wait for
// non-blocking streams (every stream here is one): at once, as on a GPU.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  Enqueue(stream, [devPtr, value, count] { std::memset(devPtr, value, count); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  Enqueue(stream, [fn, userData] { fn(userData); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;  // a stream still waiting on it holds its state
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto record = std::make_shared<host_gpu::Record>();
  {
    std::lock_guard<std::mutex> lock(event->state->mu);
    event->state->latest = record;
  }
  Enqueue(stream, [record] {
    std::lock_guard<std::mutex> lock(record->mu);
    record->done = true;
    record->cv.notify_all();
  });
  return cudaSuccess;
}

namespace host_gpu {
namespace {

std::shared_ptr<Record> Latest(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(event->state->mu);
  return event->state->latest;
}

void WaitFor(const std::shared_ptr<Record>& record) {
  if (record == nullptr) return;
  std::unique_lock<std::mutex> lock(record->mu);
  record->cv.wait(lock, [&] { return record->done; });
}

}  // namespace
}  // namespace host_gpu

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const std::shared_ptr<host_gpu::Record> record = host_gpu::Latest(event);
  if (record == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(record->mu);
  return record->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  host_gpu::WaitFor(host_gpu::Latest(event));
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (const int injected = host_gpu::TakeInjected("cudaStreamWaitEvent")) {
    return static_cast<cudaError_t>(injected);
  }
  std::shared_ptr<host_gpu::Record> record = host_gpu::Latest(event);  // the one recorded now
  if (record != nullptr) Enqueue(stream, [record] { host_gpu::WaitFor(record); });
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  host_gpu::DrainAll();
  return cudaSuccess;
}

// The driver API, for the batched-copy kernel (tfring/kernels/backends/cuda/batched_copy.cc):
// its one parameter holds up to 64 copies, and the grid's y dimension says how many.
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  *module = reinterpret_cast<CUmodule>(const_cast<void*>(image));
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (std::strcmp(name, "tfring_batched_copy") != 0) return CUDA_ERROR_NOT_FOUND;
  *hfunc = reinterpret_cast<CUfunction>(hmod);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra) {
  struct CopyBatch {
    const void* src[64];
    void* dst[64];
    unsigned long long bytes[64];
  };
  if (gridDimY > 64 || kernelParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // As a launch does, the parameter is copied now: the caller's copy is gone by the time
  // the stream runs it.
  auto batch = std::make_shared<CopyBatch>(*static_cast<const CopyBatch*>(kernelParams[0]));
  const unsigned count = gridDimY;
  Enqueue(reinterpret_cast<CUstream_st*>(hStream), [batch, count] {
    for (unsigned i = 0; i < count; ++i) std::memcpy(batch->dst[i], batch->src[i], batch->bytes[i]);
  });
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  *pStr = error == CUDA_SUCCESS ? "no error" : "host GPU driver error";
  return CUDA_SUCCESS;
}

}  // extern "C"
