"""Keras model.fit throughput: tfring on N ranks against one process and against TF's own
MultiWorkerMirroredStrategy, in one run.

    make bench-keras            # or: .venv/bin/python bench/keras_fit.py [--repeats 3]

For each model (an MLP of 20 x Dense(512): 5.3M parameters, 42 gradient tensors, 21 MB per
step; a small CNN; and "comm", 61 small Dense layers whose step is mostly communication: 122
gradient tensors of at most 4 KiB) at batch 64 per process it measures samples/s, in total
over all processes, of:
  - one process, plain Keras 3, no tfring (all cores);
  - tfring.keras on N ranks (mpirun --bind-to core), which must end with identical weights;
  - tf.distribute.MultiWorkerMirroredStrategy on N workers (each pinned to a core), with
    tf_keras: TF's own way, which fails with Keras 3's model.fit.
Each is the median of --repeats runs; the ratio column divides by the one-process figure.
Timed steps exclude the first --warmup ones (tracing, allocation). A second table gives each
model's step time in one process pinned to one core (the compute one rank has), and with
tfring, and tfring's overhead per step: the difference, in microseconds and as a share of
tfring's step (the allreduces, and what tfring adds to them).
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


def run_single(model, args):
    proc = subprocess.run([sys.executable, WORKER, "single", *worker_args(model, args)],
                          env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, "one process")


def run_single_one_core(model, args):
    """One process on one core: the compute a rank has, so that tfring's step time minus
    this one is what the collectives cost per step."""
    if not _has_taskset():
        raise RuntimeError("taskset is not installed")
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, WORKER, "single",
                           *worker_args(model, args)],
                          env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, "one process on one core")


def run_tfring(model, args):
    # One core per rank when there are enough; otherwise oversubscribe, unbound.
    placement = (["--bind-to", "core"] if args.np <= os.cpu_count() else ["--oversubscribe"])
    cmd = [os.path.join(BIN, "mpirun"), "-np", str(args.np), *placement,
           sys.executable, WORKER, "tfring", *worker_args(model, args)]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    return parse_result(proc.stdout + proc.stderr, "tfring")


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_mwms(model, args):
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


def worker_args(model, args):
    return ["--model", model, "--batch", str(args.batch), "--steps", str(args.steps),
            "--warmup", str(args.warmup)]


def median_of(runs):
    return statistics.median(r["samples_per_s"] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn,comm")
    parser.add_argument("--np", type=int, default=2, help="ranks / workers")
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-mwms", action="store_true")
    args = parser.parse_args()

    print(f"model.fit samples/s (total over processes), batch {args.batch} per process, "
          f"{args.np} ranks, {os.cpu_count()} cores, median of {args.repeats}", flush=True)
    print("| model | set-up | samples/s | ratio to one process | runs | note |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    setups = [("one process (Keras 3, no tfring)", run_single),
              (f"tfring, {args.np} ranks", run_tfring),
              ("one process on one core", run_single_one_core)]
    if not args.skip_mwms:
        setups.append((f"MultiWorkerMirroredStrategy, {args.np} workers (tf_keras)", run_mwms))
    step_ms = {}  # (model, set-up index) -> median step time
    for model in args.models.split(","):
        base = None
        for index, (label, fn) in enumerate(setups):
            try:
                runs = [fn(model, args) for _ in range(args.repeats)]
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"| {model} | {label} | failed | | | {str(e).splitlines()[0][:80]} |",
                      flush=True)
                continue
            value = median_of(runs)
            step_ms[(model, index)] = statistics.median(r["step_ms"] for r in runs)
            base = value if base is None else base
            note = ""
            if "identical_weights" in runs[0]:
                same = all(r["identical_weights"] for r in runs)
                note = f"identical weights on all ranks: {same}"
            each = ", ".join(f"{r['samples_per_s']:.0f}" for r in runs)
            print(f"| {model} | {label} | {value:.0f} | {value / base:.2f} | {each} | {note} |",
                  flush=True)
    print("\nstep time (median ms) and tfring's overhead per step against one process on "
          "one core")
    print("| model | one process, one core | tfring, per rank | overhead us | "
          "share of tfring's step |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for model in args.models.split(","):
        if (model, 2) in step_ms and (model, 1) in step_ms:
            one, ring = step_ms[(model, 2)], step_ms[(model, 1)]
            print(f"| {model} | {one:.2f} | {ring:.2f} | {(ring - one) * 1e3:.0f} | "
                  f"{(ring - one) / ring:.0%} |", flush=True)


if __name__ == "__main__":
    main()
