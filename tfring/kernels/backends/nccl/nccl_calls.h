// The NCCL calls tfring and its native tests make, one line each:
//   X(return type, name, (parameters), (arguments))
// backends/nccl/nccl_library.cc expands it into the table of functions looked up in the NCCL
// tfring chose, and into tfring's own definitions of these names, which call through that
// table. NCCL's reshaping calls (revoke, shrink, grow) are not here: they are optional, looked
// up by version (NcclReshapeCalls).
#pragma once

#include <nccl.h>

#define TFRING_NCCL_CALLS(X)                                                                 \
  X(ncclResult_t, ncclGetVersion, (int* version), (version))                                 \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* id), (id))                                 \
  X(ncclResult_t, ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank), \
    (comm, nranks, id, rank))                                                                \
  X(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t* comm, int nranks, ncclUniqueId id,    \
                                           int rank, ncclConfig_t* config),                  \
    (comm, nranks, id, rank, config))                                                        \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))                                \
  X(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))                                  \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error),             \
    (comm, error))                                                                           \
  X(const char*, ncclGetErrorString, (ncclResult_t result), (result))                        \
  X(const char*, ncclGetLastError, (ncclComm_t comm), (comm))                                \
  X(ncclResult_t, ncclRedOpCreatePreMulSum, (ncclRedOp_t* op, void* scalar,                  \
                                             ncclDataType_t type,                            \
                                             ncclScalarResidence_t residence,                \
                                             ncclComm_t comm),                               \
    (op, scalar, type, residence, comm))                                                     \
  X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))           \
  X(ncclResult_t, ncclAllReduce, (const void* send, void* recv, size_t count,                \
                                  ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,      \
                                  cudaStream_t stream),                                      \
    (send, recv, count, type, op, comm, stream))                                             \
  X(ncclResult_t, ncclReduce, (const void* send, void* recv, size_t count,                   \
                               ncclDataType_t type, ncclRedOp_t op, int root,                \
                               ncclComm_t comm, cudaStream_t stream),                        \
    (send, recv, count, type, op, root, comm, stream))                                       \
  X(ncclResult_t, ncclReduceScatter, (const void* send, void* recv, size_t count,            \
                                      ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,  \
                                      cudaStream_t stream),                                  \
    (send, recv, count, type, op, comm, stream))                                             \
  X(ncclResult_t, ncclAllGather, (const void* send, void* recv, size_t count,                \
                                  ncclDataType_t type, ncclComm_t comm, cudaStream_t stream), \
    (send, recv, count, type, comm, stream))                                                 \
  X(ncclResult_t, ncclBroadcast, (const void* send, void* recv, size_t count,                \
                                  ncclDataType_t type, int root, ncclComm_t comm,            \
                                  cudaStream_t stream),                                      \
    (send, recv, count, type, root, comm, stream))                                           \
  X(ncclResult_t, ncclSend, (const void* send, size_t count, ncclDataType_t type, int peer,  \
                             ncclComm_t comm, cudaStream_t stream),                          \
    (send, count, type, peer, comm, stream))                                                 \
  X(ncclResult_t, ncclRecv, (void* recv, size_t count, ncclDataType_t type, int peer,        \
                             ncclComm_t comm, cudaStream_t stream),                          \
    (recv, count, type, peer, comm, stream))                                                 \
  X(ncclResult_t, ncclGroupStart, (), ())                                                    \
  X(ncclResult_t, ncclGroupEnd, (), ())
