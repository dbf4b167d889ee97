"""One rank of bench/allreduce.py (run under mpirun by it; see there for what is measured).

    _allreduce_worker.py raw    --out F [--max-mib M]   # mpi4py only: no TensorFlow, no tfring
    _allreduce_worker.py tfring --out F [--max-mib M]   # tfring, and mpi4py beside it
    _allreduce_worker.py breakdown --out F              # where one op's time goes

Every figure is the slowest rank's median over timed calls, each call started together on
all ranks (a barrier before it). Rank 0 writes the figures as JSON to --out.
"""

import argparse
import collections
import json
import os
import statistics
import sys
import time

import numpy as np

# Set by main(): mpi4py is imported only after tfring.init() in the tfring mode, so that
# tfring initializes MPI with the settings it runs with (importing mpi4py first would).
MPI = None
comm = None


def timed(fns, iterations, warmup=3):
    """The slowest rank's median seconds of one call of each of `fns` (a dict), calls of
    the different functions interleaved, so that all of them see the same machine: on a
    shared VM, memory bandwidth and timer noise change from minute to minute.

    Each round calls them in a new order (the same on every rank: seeded by the round), as
    a call pays for what ran just before it: in a fixed order, the step that followed raw
    MPI's packing of 1.6 MB took 0.3-0.5 ms longer (its caches evicted), which read as
    unnamed ops costing that much more than named ones."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {key: [] for key in fns}
    keys = list(fns)
    for round_ in range(iterations):
        for key in np.random.default_rng(round_).permutation(keys):
            fn = fns[key]
            comm.Barrier()
            start = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - start)
    return {key: comm.allreduce(statistics.median(s), op=MPI.MAX) for key, s in samples.items()}


def iterations_for(nbytes):
    return int(max(10, min(300, 4e8 / max(nbytes, 1) / 10)))


def sizes(max_bytes):
    n = 4
    while n <= max_bytes:
        yield n
        n *= 4 if n < 1 << 20 else 2


def expected():
    return comm.size * (comm.size + 1) / 2  # rank r contributes r + 1 everywhere


def wrong_count(arrays):
    """Elements, over all ranks, that differ from the exact sum."""
    return comm.allreduce(sum(int(np.count_nonzero(np.asarray(a) != expected()))
                              for a in arrays))


def raw_buffers(nbytes, huge_pages=True):
    """Send and receive arrays for raw MPI. numpy asks the kernel for transparent huge pages
    for arrays of 4 MiB and more (madvise); TensorFlow's allocator does not, and MPI is
    up to 1.6x faster on huge pages here. huge_pages=False makes them as TF's tensors are."""
    multiarray = (np._core if hasattr(np, "_core") else np.core).multiarray
    previous = multiarray._set_madvise_hugepage(huge_pages)
    try:
        send = np.full(nbytes // 4, comm.rank + 1, dtype=np.float32)
        return send, np.empty_like(send)
    finally:
        multiarray._set_madvise_hugepage(previous)


def raw_sweep(max_bytes):
    rows = {}
    for nbytes in sizes(max_bytes):
        send, recv = raw_buffers(nbytes)
        t = timed({"s": lambda: comm.Allreduce(send, recv, op=MPI.SUM)}, iterations_for(nbytes))
        rows[nbytes] = {"s": t["s"], "wrong": wrong_count([recv])}
    return rows


def raw_step_fns(n, kib):
    """Raw MPI for a step of n tensors of k KiB: n separate calls; one packed call on a
    buffer packed beforehand; and the same call with the packing, the n separate arrays
    gathered into the (reused) send buffer first, as a program whose tensors live apart must
    do (the results are then views of the receive buffer: no copy out). And the receive
    buffers to check."""
    sends = [np.full(kib * 256, comm.rank + 1, dtype=np.float32) for _ in range(n)]
    recvs = [np.empty_like(s) for s in sends]
    packed_send = np.concatenate(sends)
    packed_recv = np.empty_like(packed_send)
    packing_send = np.empty_like(packed_send)
    packing_recv = np.empty_like(packed_send)

    def separate():
        for s, r in zip(sends, recvs):
            comm.Allreduce(s, r, op=MPI.SUM)

    def packed():
        comm.Allreduce(packed_send, packed_recv, op=MPI.SUM)

    def packing():
        np.concatenate(sends, out=packing_send)
        comm.Allreduce(packing_send, packing_recv, op=MPI.SUM)

    return ({"mpi_separate": separate, "mpi_packed": packed, "mpi_packing": packing},
            recvs + [packed_recv, packing_recv])


def step_iterations(n):
    return max(20, min(200, 20000 // n))


def raw_steps(cases):
    out = {}
    for n, kib in cases:
        fns, buffers = raw_step_fns(n, kib)
        row = timed(fns, step_iterations(n))
        row["wrong"] = wrong_count(buffers)
        out[f"{n}x{kib}"] = row
    return out


def tfring_sweep(max_bytes, tf, tfring):
    """Per size, interleaved: tfring named and unnamed, raw MPI in this process (so with the
    MPI settings tfring runs with), also on arrays without huge pages (as TF's tensors are),
    and TF's own eager op on the same tensor."""
    rows = {}
    for nbytes in sizes(max_bytes):
        send, recv = raw_buffers(nbytes)
        send_small, recv_small = raw_buffers(nbytes, huge_pages=False)
        tensor = tf.constant(send)
        name = f"bench.{nbytes}"
        held = {}

        # The result is kept but not read inside the timed call (.numpy() would add a copy).
        def named():
            held["named"] = tfring.allreduce(tensor, op=tfring.Sum, name=name)

        def unnamed():
            held["unnamed"] = tfring.allreduce(tensor, op=tfring.Sum)

        row = timed({"named": named, "unnamed": unnamed,
                     "mpi_small_pages": lambda: comm.Allreduce(send_small, recv_small,
                                                               op=MPI.SUM),
                     "mpi": lambda: comm.Allreduce(send, recv, op=MPI.SUM),
                     "tf_op": lambda: tf.identity(tensor)}, iterations_for(nbytes),
                    # The first size also warms the process up (TensorFlow's first eager
                    # calls, the runtime's thread settling): with 3 calls its row read
                    # 46-58 us for tfring and 31-44 for TF's op at 4 B, against 39 and 31
                    # at 16 B.
                    warmup=3 if rows else 200)
        row["wrong"] = wrong_count([held["named"].numpy(), held["unnamed"].numpy(), recv,
                                    recv_small])
        rows[nbytes] = row
    return rows


def tfring_steps(cases, tf, tfring):
    """A step of n tensors of k KiB in one tf.function: separate ops, unnamed (as a training
    step has them: tfring derives names from the graph) and named; one grouped_allreduce;
    TF's floor, the same function with tf.identity of each; and raw MPI's separate and
    packed calls in this process; interleaved. As in a training step, whose gradients are
    used inside the graph, the timed functions return nothing of their results to Python
    (each is a control dependency of the one scalar returned): handing 1000 tensors to
    Python costs more than the collectives (Python's garbage collector above all). The
    results are checked exactly by calling each function once more, returning them."""
    out = {}
    for n, kib in cases:
        inputs = [tf.constant(np.full(kib * 256, comm.rank + 1, dtype=np.float32))
                  for _ in range(n)]
        steps = {
            "unnamed": lambda: [tfring.allreduce(x, op=tfring.Sum) for x in inputs],
            "named": lambda: [tfring.allreduce(x, op=tfring.Sum, name=f"step{n}.{i}")
                              for i, x in enumerate(inputs)],
            "grouped": lambda: tfring.grouped_allreduce(inputs, op=tfring.Sum),
            "tf_floor": lambda: [tf.identity(x) for x in inputs],
        }
        fns = {key: tf.function(_results_stay_in_graph(tf, step)) for key, step in steps.items()}
        raw_fns, buffers = raw_step_fns(n, kib)
        row = timed({**fns, **raw_fns}, step_iterations(n))
        results = [t.numpy() for key in ("unnamed", "named", "grouped")
                   for t in tf.function(steps[key])()]
        row["wrong"] = wrong_count(results + buffers)
        out[f"{n}x{kib}"] = row
    return out


def _results_stay_in_graph(tf, step):
    def run():
        with tf.control_dependencies(step()):
            return tf.constant(0.0)
    return run


STEP_CASES = [(100, 16), (10, 4), (100, 4), (1000, 4)]


def breakdown(tf, tfring, timeline_path):
    """Where one op's time goes, for three cases: a 4 B eager allreduce named and unnamed,
    a 1 MiB eager one, and a step of 100 x 16 KiB in a tf.function. The call is timed from
    Python; the raw op (TensorFlow's fast path with every attribute given, as tfring's
    eager call ends: tfring/_ops/eager_call.py; no tfring Python around it) and
    tf.identity beside it; rank 0's timeline (on for this job only) gives the runtime's
    phases: SUBMIT (kernel start to the cycle taking it), NEGOTIATE (until every rank has
    it: one AND when cached), QUEUE, the copies and the MPI call. Means per op, in us."""
    from tfring import timeline
    from tfring._ops import eager_call as _eager_call
    small = tf.constant(np.full(1, comm.rank + 1, dtype=np.float32))
    big = tf.constant(np.full(1 << 18, comm.rank + 1, dtype=np.float32))
    inputs = [tf.constant(np.full(4096, comm.rank + 1, dtype=np.float32)) for _ in range(100)]

    @tf.function
    def step():
        return [tfring.allreduce(x, op=tfring.Sum) for x in inputs]

    def raw(tensor, name):
        return lambda: _eager_call.allreduce(tensor, tfring.Sum, 1.0, 1.0, name, "", True, ())

    cases = {
        "4 B named": ({"call": lambda: tfring.allreduce(small, op=tfring.Sum, name="bd.small"),
                       "raw op": raw(small, "bd.small.raw"),
                       "TF op": lambda: tf.identity(small)}, "bd.small", 300),
        "4 B unnamed": ({"call": lambda: tfring.allreduce(small, op=tfring.Sum)}, "unnamed",
                        300),
        "1 MiB named": ({"call": lambda: tfring.allreduce(big, op=tfring.Sum, name="bd.big"),
                         "raw op": raw(big, "bd.big.raw"),
                         "TF op": lambda: tf.identity(big)}, "bd.big", 60),
        "100 x 16 KiB step": ({"call": step, "TF op": lambda: [tf.identity(x) for x in inputs]},
                              "TfringAllreduce", 30),
    }
    out = {}
    for case, (fns, prefix, iterations) in cases.items():
        for fn in fns.values():
            fn()  # negotiated and cached before the timeline starts
        tfring.start_timeline(timeline_path)
        times = timed(fns, iterations, warmup=0)
        tfring.stop_timeline()
        row = {key: t * 1e6 for key, t in times.items()}
        if comm.rank == 0:
            phases = collections.defaultdict(lambda: [0, 0])
            for tensor, cells in timeline.phase_totals(timeline.load(timeline_path)).items():
                if tensor.startswith(prefix) and not tensor.endswith(".raw"):
                    for phase, (total, count) in cells.items():
                        phases[phase][0] += total
                        phases[phase][1] += count
            tensors = max(1, phases["SUBMIT"][1])  # one SUBMIT per tensor per call
            row["tensors per call"] = round(tensors / iterations)
            row["phases"] = {phase: total / tensors for phase, (total, _) in phases.items()}
        out[case] = row
    return out


def main():
    global MPI, comm
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["raw", "tfring", "breakdown"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-mib", type=float, default=64)
    args = parser.parse_args()
    max_bytes = int(args.max_mib * (1 << 20))
    result = {}
    if args.mode in ("tfring", "breakdown"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf
        import tfring
        tfring.init()  # MPI with MPI_THREAD_MULTIPLE; mpi4py reuses it
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        result["mpi_version"] = tfring.mpi_version()
        if args.mode == "breakdown":
            result["breakdown"] = breakdown(tf, tfring, args.out + ".timeline.json")
        else:
            result["tfring_sweep"] = tfring_sweep(max_bytes, tf, tfring)
            result["tfring_steps"] = tfring_steps(STEP_CASES, tf, tfring)
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        result["raw_sweep"] = raw_sweep(max_bytes)
        result["raw_steps"] = raw_steps(STEP_CASES)
    result["size"] = comm.size
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
