#!/usr/bin/env bash
# Runs a native GPU test or benchmark with N ranks on however many GPUs this machine has
# (one is enough): tools/gpu_ranks.sh N BINARY [ARGS...], e.g.
#   tools/gpu_ranks.sh 3 build/tests/test_nccl_runtime
#   tools/gpu_ranks.sh 2 build/bench/nccl_allreduce 64
# NCCL refuses two ranks on one GPU of one host. Each rank here claims a host of its own
# (NCCL_HOSTID), and NCCL moves data between them through its socket transport over
# loopback, so collectives really cross ranks: bootstrap, ring steps, errors on one rank.
# It proves nothing about NVLink or InfiniBand speeds (BUILD.md, 'GPU (NCCL)').
# TFRING_TEST_SHARE_GPU=1 tells the tests to put rank i on GPU i % count (tests/cpp/gpu_ranks.h).
# RANKS_PER_HOST=k, if set, makes tfring's "hosts" of k consecutive ranks, each rank's
# TFRING_HOSTID naming its block (hierarchical NCCL on one GPU:
# RANKS_PER_HOST=2 tools/gpu_ranks.sh 4 ...).
# MPIRUN picks the mpirun and its flags (default: the one on PATH); Open MPI's -x exports
# the settings.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N BINARY [ARGS...]" >&2
  exit 2
fi
ranks=$1
shift
# MPIRUN is split into words on purpose: MPIRUN="mpirun --with-ft ulfm" adds its flags.
# shellcheck disable=SC2086
exec ${MPIRUN:-mpirun} --oversubscribe -np "$ranks" \
  -x TFRING_TEST_SHARE_GPU=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo \
  -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x NCCL_IB_DISABLE=1 -x NCCL_NVLS_ENABLE=0 \
  bash -c 'rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
    export NCCL_HOSTID="tfring-rank-$rank"
    if [ -n "$0" ]; then export TFRING_HOSTID="host-$((rank / $0))"; fi
    exec "$@"' "${RANKS_PER_HOST:-}" "$@"
