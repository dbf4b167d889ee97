"""Allreduce benchmark: tfring eager ops against raw MPI (mpi4py) on the same buffers.

    mpirun -np 2 --bind-to core python bench/allreduce.py [--max-mib 64] [--runs 1]

Prints, per float32 size, the median time of one call, algbw and busbw (nccl-tests columns:
busbw = algbw * 2(n-1)/n) and a #wrong count (elements that differ from the exact sum), for
tfring and for mpi4py's Allreduce, with the ratio of their times; then one step of 100
tensors of 16 KiB inside one tf.function against raw MPI as 100 calls and as one packed call.

Two TensorFlow floors are printed beside them, because no TF op can beat them on the same
machine: "TF op us", one eager tf.identity of the same tensor (TF's own per-op cost), and a
tf.function that returns tf.identity of the same 100 tensors.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402

tfring.init()  # initializes MPI with MPI_THREAD_MULTIPLE; mpi4py then reuses it
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
EXPECTED = size * (size + 1) / 2  # rank r contributes r+1 everywhere


def timed(fn, iterations):
    samples = []
    for _ in range(iterations):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    # The slowest rank decides when a collective is done.
    return comm.allreduce(statistics.median(samples), op=MPI.MAX)


def iterations_for(nbytes):
    return int(max(10, min(300, 4e8 / max(nbytes, 1) / 10)))


def sweep(max_bytes):
    if rank == 0:
        print(f"# {size} ranks, float32 Sum, median of each call; {tfring.mpi_version()}")
        print(f"{'bytes':>10} | {'tfring us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10} "
              f"{'#wrong':>6} | {'MPI us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10} "
              f"{'#wrong':>6} | {'MPI/tfring':>10} | {'TF op us':>8}")
    nbytes = 4
    while nbytes <= max_bytes:
        count = nbytes // 4
        send = np.full(count, rank + 1, dtype=np.float32)
        recv = np.empty_like(send)
        tensor = tf.constant(send)
        name = f"bench.{nbytes}"
        result = {}

        def run_tfring():
            result["t"] = tfring.allreduce(tensor, op=tfring.Sum, name=name)

        def run_mpi():
            comm.Allreduce(send, recv, op=MPI.SUM)

        def run_identity():
            tf.identity(tensor)

        iters = iterations_for(nbytes)
        for fn in (run_tfring, run_mpi, run_identity):
            for _ in range(3):
                fn()  # warm up: negotiation cache, allocations
        t_ring = timed(run_tfring, iters)
        t_mpi = timed(run_mpi, iters)
        t_identity = timed(run_identity, iters)
        wrong_ring = int(np.count_nonzero(result["t"].numpy() != EXPECTED))
        wrong_mpi = int(np.count_nonzero(recv != EXPECTED))
        wrong_ring = comm.allreduce(wrong_ring)
        wrong_mpi = comm.allreduce(wrong_mpi)
        if rank == 0:
            factor = 2 * (size - 1) / size
            row = [nbytes]
            for t, wrong in ((t_ring, wrong_ring), (t_mpi, wrong_mpi)):
                algbw = nbytes / t / 1e9
                row += [t * 1e6, algbw, algbw * factor, wrong]
            print(f"{row[0]:>10} | {row[1]:>10.1f} {row[2]:>10.3f} {row[3]:>10.3f} {row[4]:>6} | "
                  f"{row[5]:>10.1f} {row[6]:>10.3f} {row[7]:>10.3f} {row[8]:>6} | "
                  f"{t_mpi / t_ring:>10.2f} | {t_identity * 1e6:>8.1f}", flush=True)
        nbytes *= 4 if nbytes < 1 << 20 else 2


def fusion_step(tensors=100, kib=16):
    count = kib * 1024 // 4
    inputs = [tf.constant(np.full(count, rank + 1, dtype=np.float32)) for _ in range(tensors)]

    @tf.function
    def step():
        return [tfring.allreduce(x, op=tfring.Sum, name=f"step.{i}") for i, x in enumerate(inputs)]

    @tf.function
    def identity_step():
        return [tf.identity(x) for x in inputs]

    sends = [np.full(count, rank + 1, dtype=np.float32) for _ in range(tensors)]
    recvs = [np.empty_like(s) for s in sends]
    packed_send = np.concatenate(sends)
    packed_recv = np.empty_like(packed_send)
    out = {}

    def run_tfring():
        out["r"] = step()

    def separate():
        for s, r in zip(sends, recvs):
            comm.Allreduce(s, r, op=MPI.SUM)

    def packed():
        comm.Allreduce(packed_send, packed_recv, op=MPI.SUM)

    for fn in (run_tfring, separate, packed, identity_step):
        for _ in range(5):
            fn()
    t_ring, t_sep, t_packed, t_identity = (
        timed(fn, 100) for fn in (run_tfring, separate, packed, identity_step))
    wrong = comm.allreduce(sum(int(np.count_nonzero(t.numpy() != EXPECTED)) for t in out["r"]))
    if rank == 0:
        print(f"\n# one step of {tensors} x {kib} KiB float32 allreduces (median step time)")
        print(f"tfring, inside one tf.function:  {t_ring * 1e3:8.3f} ms   #wrong {wrong}")
        print(f"raw MPI, {tensors} separate calls:    {t_sep * 1e3:8.3f} ms")
        print(f"raw MPI, one packed call:        {t_packed * 1e3:8.3f} ms")
        print(f"TF floor, tf.identity of each:   {t_identity * 1e3:8.3f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mib", type=float, default=64)
    args = parser.parse_args()
    sweep(int(args.max_mib * (1 << 20)))
    fusion_step()


if __name__ == "__main__":
    main()
