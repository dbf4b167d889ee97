"""Run by every rank of the small jobs (tests/slurm, test_mpi_operator.py): one allreduce,
checked here against the sum every rank can compute, and one line of what the rank saw, which
the tests read: "rank R of N, local L of LS, cross C of CS, on HOST: sum ok"."""

import socket

import numpy as np

import tfring

tfring.init()
rank, size = tfring.rank(), tfring.size()
got = tfring.allreduce(np.arange(5, dtype=np.float32) * (rank + 1), op=tfring.Sum).numpy()
want = np.arange(5, dtype=np.float32) * (size * (size + 1) // 2)
verdict = "sum ok" if np.array_equal(got, want) else f"sum WRONG: {got} != {want}"
print(f"rank {rank} of {size}, local {tfring.local_rank()} of {tfring.local_size()}, "
      f"cross {tfring.cross_rank()} of {tfring.cross_size()}, on {socket.gethostname()}: "
      f"{verdict}", flush=True)
