"""Keras model.fit throughput: tfring on N ranks against one process and against TF's own
MultiWorkerMirroredStrategy, in one run.

    make bench-keras            # or: .venv/bin/python bench/keras_fit.py [--repeats 3]

For each model (an MLP of 20 x Dense(512): 5.3M parameters, 42 gradient tensors, 21 MB per
step; a small CNN; and "comm", 61 small Dense layers whose step is mostly communication: 122
gradient tensors of at most 4 KiB) at batch 64 per process it measures samples/s, in total
over all processes, of:
  - one process, plain Keras 3, no tfring (all cores);
  - tfring.keras on N ranks (mpirun --bind-to core), which must end with identical weights;
  - the same with shard_optimizer_state=True (docs/sharded-optimizer.md), compared with the
    unsharded step in a table of its own, with the bytes per step each rank hands MPI;
  - tf.distribute.MultiWorkerMirroredStrategy on N workers (each pinned to a core), with
    tf_keras: TF's own way, which fails with Keras 3's model.fit.
The first two also with XLA (`jit_compile=True`, which tfring keeps: its allreduce runs
inside the compiled step); the one-process-on-one-core row too, for the overhead table.
Each is the median of --repeats runs, taken in rounds (each round runs every set-up once, so
that all of them see the VM's drift alike); the ratio column divides by the faster of the two
one-process figures (with and without XLA), and the XLA rows say whether the step really
ran under XLA.
Timed steps exclude the first --warmup ones (tracing, allocation). samples/s is from the mean
step. A second table gives each model's typical step time (each run's median step: a few
steps of a run take several times as long, and move a short run's mean by more than the
overhead in question) in one process pinned to one core (the compute one rank has), and with
tfring, and tfring's overhead per step: the difference, in microseconds and as a share of
tfring's step (the allreduces, and what tfring adds to them). Beside them, the "async floor":
the same ranks and step with each gradient's allreduce replaced by an async op that passes
its input through and completes at once (bench/ops/async_floor.cc): what
TensorFlow itself charges for the step's async ops. tfring over the floor is then the
communication and tfring's runtime. And the floor with raw MPI (mpi4py, tfring's MPI
settings) moving the step's gradients after each step, packed in one allreduce after a
4-byte one (the agreement tfring's cycle makes), its async ops completed as tfring's are (a
step's burst together, from a background thread): TensorFlow's and the transport's cost,
so that tfring over it is tfring's runtime alone.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_keras_fit_worker.py")
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def parse_result(output, what):
    for line in output.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{what} printed no result:\n{output[-3000:]}")


def run_single(model, args, jit=False):
    proc = subprocess.run([sys.executable, WORKER, "single", *worker_args(model, args, jit)],
                          env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, "one process")


def run_single_one_core(model, args, jit=False):
    """One process on one core: the compute a rank has, so that tfring's step time minus
    this one is what the collectives cost per step."""
    if not _has_taskset():
        raise RuntimeError("taskset is not installed")
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, WORKER, "single",
                           *worker_args(model, args, jit)],
                          env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, "one process on one core")


def run_on_ranks(mode, what, model, args, jit, extra=()):
    # One core per rank when there are enough; otherwise oversubscribe, unbound.
    placement = (["--bind-to", "core"] if args.np <= os.cpu_count() else ["--oversubscribe"])
    cmd = [os.path.join(BIN, "mpirun"), "-np", str(args.np), *placement,
           sys.executable, WORKER, mode, *worker_args(model, args, jit), *extra]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, what)


def run_tfring(model, args, jit=False):
    return run_on_ranks("tfring", "tfring", model, args, jit)


def run_tfring_sharded(model, args, jit=False):
    """tfring with shard_optimizer_state=True (docs/sharded-optimizer.md)."""
    return run_on_ranks("tfring", "tfring, sharded", model, args, jit,
                        ["--shard-optimizer-state"])


def run_floor(model, args, jit=False):
    """tfring's step with each gradient's allreduce replaced by the async floor op."""
    return run_on_ranks("floor", "the async floor", model, args, jit)


def run_floor_mpi(model, args, jit=False):
    """The async floor, and after each step raw MPI moving what the step's allreduces must
    (the gradients packed, and a 4-byte agreement): the step without tfring's runtime."""
    return run_on_ranks("floor-mpi", "the async floor with raw MPI", model, args, jit)


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_mwms(model, args, jit=False):
    workers = [f"localhost:{p}" for p in free_ports(args.np)]
    procs = []
    for index in range(args.np):
        env = dict(ENV, TF_USE_LEGACY_KERAS="1", TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        pin = ["taskset", "-c", str(index % os.cpu_count())] if _has_taskset() else []
        procs.append(subprocess.Popen(pin + [sys.executable, WORKER, "mwms",
                                             *worker_args(model, args)],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    return parse_result(outputs[0], "MultiWorkerMirroredStrategy")


def _has_taskset():
    return subprocess.run(["which", "taskset"], capture_output=True).returncode == 0


# Timed steps per run unless --steps says: the comm model's step is a few ms, and its
# medians need more of them to settle.
DEFAULT_STEPS = {"mlp": 60, "cnn": 60, "comm": 400}


def worker_args(model, args, jit=False):
    steps = args.steps if args.steps is not None else DEFAULT_STEPS[model]
    return ["--model", model, "--batch", str(args.batch), "--steps", str(steps),
            "--warmup", str(args.warmup), "--optimizer", args.optimizer] + (
                ["--jit-compile"] if jit else [])


def median_of(runs):
    return statistics.median(r["samples_per_s"] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn,comm")
    parser.add_argument("--np", type=int, default=2, help="ranks / workers")
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per run (default: 60; the comm model 400)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-mwms", action="store_true")
    parser.add_argument("--skip-xla", action="store_true", help="leave out the XLA rows")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                        help="the wrapped optimizer (sgd: the figures in docs/benchmarks.md; "
                             "adam: state that sharding divides)")
    parser.add_argument("--sharded-only", action="store_true",
                        help="only tfring's step unsharded and with shard_optimizer_state=True")
    args = parser.parse_args()

    print(f"model.fit samples/s (total over processes), batch {args.batch} per process, "
          f"optimizer {args.optimizer}, "
          f"{args.np} ranks, {os.cpu_count()} cores, median of {args.repeats}", flush=True)
    print("| model | set-up | samples/s | ratio to one process | runs | note |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    # (label, function, XLA); the overhead table pairs rows by these keys.
    setups = [("one process (Keras 3, no tfring)", run_single, False),
              (f"tfring, {args.np} ranks", run_tfring, False),
              (f"tfring, {args.np} ranks, shard_optimizer_state=True", run_tfring_sharded,
               False),
              ("one process on one core", run_single_one_core, False),
              (f"async floor, {args.np} ranks (no communication)", run_floor, False),
              (f"async floor + raw MPI's transfer, {args.np} ranks", run_floor_mpi, False)]
    if not args.skip_xla:
        setups += [("one process, XLA", run_single, True),
                   (f"tfring, {args.np} ranks, XLA", run_tfring, True),
                   ("one process on one core, XLA", run_single_one_core, True)]
    if not args.skip_mwms:
        setups.append((f"MultiWorkerMirroredStrategy, {args.np} workers (tf_keras)", run_mwms,
                       False))
    if args.sharded_only:
        setups = [s for s in setups if s[1] in (run_tfring, run_tfring_sharded) and not s[2]]
    step_ms = {}  # (model, function, XLA) -> median step time
    weight_bytes = {}  # model -> bytes of its weights
    buffer_bytes = {}  # model -> bytes of its sharded flat buffers (weights and padding)
    for model in args.models.split(","):
        # Round by round, every set-up once per round: the VM's speed drifts from minute to
        # minute, and set-ups run one after another would each see another phase of it.
        results = {label: [] for label, _, _ in setups}  # a list of runs, or the error
        for _ in range(args.repeats):
            for label, fn, jit in setups:
                if isinstance(results[label], str):
                    continue  # failed in an earlier round
                try:
                    results[label].append(fn(model, args, jit))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    results[label] = str(e).splitlines()[0][:80]
        rows = []
        for label, fn, jit in setups:
            runs = results[label]
            if isinstance(runs, str):
                rows.append((label, None, runs))
                continue
            step_ms[(model, fn, jit)] = statistics.median(r["step_median_ms"] for r in runs)
            weight_bytes[model] = runs[0].get("weight_bytes", weight_bytes.get(model))
            if "sharded_buffer_bytes" in runs[0]:
                buffer_bytes[model] = runs[0]["sharded_buffer_bytes"]
            notes = []
            if "identical_weights" in runs[0]:
                notes.append("identical weights on all ranks: "
                             f"{all(r['identical_weights'] for r in runs)}")
            if jit:
                notes.append(f"ran under XLA: {all(r.get('jit_compile') for r in runs)}")
            each = ", ".join(f"{r['samples_per_s']:.0f}" for r in runs)
            rows.append((label, median_of(runs), (each, "; ".join(notes))))
        one_process = [value for label, value, _ in rows
                       if value is not None and label.startswith("one process") and
                       "one core" not in label]
        base = max(one_process) if one_process else None
        for label, value, rest in rows:
            if value is None:
                print(f"| {model} | {label} | failed | | | {rest} |", flush=True)
            else:
                ratio = f"{value / base:.2f}" if base else ""
                print(f"| {model} | {label} | {value:.0f} | {ratio} | {rest[0]} | {rest[1]} |",
                      flush=True)
    print("\nstep time (ms; each run's median step, the median over runs) and tfring's "
          "overhead per step against one process on "
          "one core (the XLA row against the one-core XLA row), and against the async floor: "
          "the same ranks and step with each allreduce an async op that does nothing "
          "(TensorFlow's own cost of such ops; no XLA row: it has no lowering), and against "
          "that floor plus raw MPI moving the step's gradients packed after each step (the "
          "transport's cost: what is left above it is tfring's runtime)")
    print("| model | XLA | one process, one core | async floor, per rank | floor + raw MPI | "
          "tfring, per rank | overhead us | share of tfring's step | over the floor us | "
          "share over the floor | over floor + MPI us | share over floor + MPI |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in args.models.split(","):
        for jit in (False, True):
            one = step_ms.get((model, run_single_one_core, jit))
            ring = step_ms.get((model, run_tfring, jit))
            if one is None or ring is None:
                continue
            cells = [model, "yes" if jit else "no", f"{one:.2f}"]
            lower = [step_ms.get((model, fn, jit)) for fn in (run_floor, run_floor_mpi)]
            cells += [f"{ms:.2f}" if ms is not None else "" for ms in lower]
            cells += [f"{ring:.2f}", f"{(ring - one) * 1e3:.0f}", f"{(ring - one) / ring:.0%}"]
            for ms in lower:
                cells += ([f"{(ring - ms) * 1e3:.0f}", f"{(ring - ms) / ring:.0%}"]
                          if ms is not None else ["", ""])
            print("| " + " | ".join(cells) + " |", flush=True)

    sharded_table(args, step_ms, weight_bytes, buffer_bytes)


def sharded_table(args, step_ms, weight_bytes, buffer_bytes):
    """shard_optimizer_state=True against the unsharded step, and the bytes each rank hands
    MPI per step: an allreduce of the gradients unsharded; sharded, a reducescatter of them
    and an allgather of the weights, whose blocks are 1/N each (of the flat buffer: the
    weights and the padding that aligns each variable). In a ring, both move 2(N-1)/N of
    those bytes per rank (an allreduce is a reducescatter and an allgather)."""
    n = args.np
    print("\nshard_optimizer_state=True: step time (ms; median over runs) against tfring's "
          "unsharded step in the same rounds, and bytes per step per rank (weights of "
          "float32)")
    print("| model | unsharded step | sharded step | sharded / unsharded | gradient bytes | "
          "unsharded: allreduce in, out | sharded: reducescatter in, out; allgather in, out | "
          "ring traffic per rank: unsharded; sharded |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |")
    for model in args.models.split(","):
        plain = step_ms.get((model, run_tfring, False))
        sharded = step_ms.get((model, run_tfring_sharded, False))
        size = weight_bytes.get(model)
        if plain is None or sharded is None or size is None:
            continue
        flat = buffer_bytes.get(model, size)
        block = flat // n
        print(f"| {model} | {plain:.2f} | {sharded:.2f} | {sharded / plain:.3f} | {size:,} | "
              f"{size:,}, {size:,} | {flat:,}, {block:,}; {block:,}, {flat:,} | "
              f"{2 * (n - 1) * size // n:,}; {2 * (n - 1) * flat // n:,} |", flush=True)


if __name__ == "__main__":
    main()
