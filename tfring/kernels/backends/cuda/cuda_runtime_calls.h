// The CUDA runtime calls tfring and its native tests make, one line each:
//   X(return type, name, (parameters), (arguments))
// backends/cuda/cuda_runtime_library.cc expands it into the table of functions looked up in
// the CUDA runtime tfring chose, and into tfring's own definitions of these names, which call
// through that table. A call missing here fails the native tests' link (no libcudart is
// linked) and the library's build (builder.py, check_gpu_calls_are_tfrings); a parameter
// list that differs from cuda_runtime_api.h's fails to compile.
#pragma once

#include <cuda_runtime_api.h>

#define TFRING_CUDA_RUNTIME_CALLS(X)                                                        \
  X(cudaError_t, cudaRuntimeGetVersion, (int* version), (version))                          \
  X(cudaError_t, cudaDriverGetVersion, (int* version), (version))                           \
  X(cudaError_t, cudaGetDeviceCount, (int* count), (count))                                 \
  X(cudaError_t, cudaSetDevice, (int device), (device))                                     \
  X(cudaError_t, cudaDeviceGetPCIBusId, (char* id, int len, int device), (id, len, device)) \
  X(cudaError_t, cudaDeviceSynchronize, (void), ())                                         \
  X(cudaError_t, cudaGetDeviceProperties, (struct cudaDeviceProp* prop, int device),        \
    (prop, device))                                                                         \
  X(cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t* stream, unsigned int flags),     \
    (stream, flags))                                                                        \
  X(cudaError_t, cudaStreamDestroy, (cudaStream_t stream), (stream))                        \
  X(cudaError_t, cudaStreamSynchronize, (cudaStream_t stream), (stream))                    \
  X(cudaError_t, cudaStreamWaitEvent, (cudaStream_t stream, cudaEvent_t event,              \
                                       unsigned int flags), (stream, event, flags))         \
  X(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t* event, unsigned int flags),        \
    (event, flags))                                                                         \
  X(cudaError_t, cudaEventDestroy, (cudaEvent_t event), (event))                            \
  X(cudaError_t, cudaEventRecord, (cudaEvent_t event, cudaStream_t stream), (event, stream)) \
  X(cudaError_t, cudaEventQuery, (cudaEvent_t event), (event))                              \
  X(cudaError_t, cudaEventSynchronize, (cudaEvent_t event), (event))                        \
  X(cudaError_t, cudaMalloc, (void** ptr, size_t size), (ptr, size))                        \
  X(cudaError_t, cudaFree, (void* ptr), (ptr))                                              \
  X(cudaError_t, cudaMemcpy, (void* dst, const void* src, size_t count,                     \
                              enum cudaMemcpyKind kind), (dst, src, count, kind))           \
  X(cudaError_t, cudaMemcpyAsync, (void* dst, const void* src, size_t count,                \
                                   enum cudaMemcpyKind kind, cudaStream_t stream),          \
    (dst, src, count, kind, stream))                                                        \
  X(cudaError_t, cudaMemset, (void* ptr, int value, size_t count), (ptr, value, count))     \
  X(cudaError_t, cudaMemsetAsync, (void* ptr, int value, size_t count, cudaStream_t stream), \
    (ptr, value, count, stream))                                                            \
  X(cudaError_t, cudaLaunchHostFunc, (cudaStream_t stream, cudaHostFn_t fn, void* data),    \
    (stream, fn, data))                                                                     \
  X(cudaError_t, cudaGetLastError, (void), ())                                              \
  X(const char*, cudaGetErrorName, (cudaError_t error), (error))                            \
  X(const char*, cudaGetErrorString, (cudaError_t error), (error))
