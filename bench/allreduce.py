"""Allreduce benchmark: tfring against raw MPI (mpi4py) on the same machine, in one run.

    make bench          # or: .venv/bin/python bench/allreduce.py [--np 2] [--max-mib 64]

It runs five MPI jobs one after the other, each with `mpirun --bind-to core`:
  - raw MPI alone (mpi4py, no TensorFlow) with Open MPI's default settings, the transport's
    best ("MPI defaults"), before and after tfring's job (per figure the faster of the two:
    this shared VM's speed drifts from minute to minute);
  - tfring with its default settings but a response cache large enough for all its steps'
    tensors (TFRING_JOB_CACHE_CAPACITY below), with raw MPI in the same processes ("MPI beside":
    the MPI settings tfring runs with, `mpi_yield_when_idle=1`, see docs/settings.md). Its
    calls are interleaved with tfring's, call by call, so the ratios against it are the
    ones least disturbed by the machine's drift;
  - raw MPI alone with `mpi_yield_when_idle=1` ("MPI yield"): what that setting costs MPI;
  - the breakdown below, with rank 0's timeline on.
Each figure is the slowest rank's median over calls started together (a barrier before
each). Results are not read inside the timed call (`.numpy()` would add a copy).

It prints:
  - per float32 size from 4 B: the time of one eager allreduce with `name=` and without
    (what Horovod scripts write), the raw MPI figures (beside also on arrays without
    transparent huge pages, as TensorFlow's tensors are), TensorFlow's own eager op
    (`tf.identity` of the same tensor: the floor of any TF op), busbw (nccl-tests' bus
    bandwidth, algbw * 2(n-1)/n), and tfring's busbw as a fraction of raw MPI's;
  - one step inside a `tf.function` of n tensors of k KiB: separate unnamed ops (as a
    training step has them), separate named ops, one `grouped_allreduce`, TF's floor (the
    same function with `tf.identity` of each), and raw MPI's n separate calls, one call on
    a buffer packed beforehand, and the same call with the packing (the n arrays gathered
    into one buffer first, as tfring's grouped op must gather the tensors). The step's
    results stay in the graph (it returns one scalar that depends on them), as a training
    step's gradients do: returning 1000 tensors to Python costs more than the collectives;
  - how the step scales with the number of tensors (10, 100, 1000 of 4 KiB): a line fitted
    through the three step times gives a fixed cost per step and a cost per tensor;
  - where the time of one call goes (the last job, with rank 0's timeline on): a 4 B eager
    allreduce named and unnamed, a 1 MiB one and a step of 100 x 16 KiB, split into
    tfring's Python, the runtime's phases (SUBMIT, NEGOTIATE, QUEUE, copies, MPI) and what
    lies outside them (TF's dispatch, the hand-off back to TF);
  - the issue's performance aims against this run's figures, each beside what TensorFlow
    itself costs there, so that a miss says whose cost it is (bench/_aims.py).
Every result is checked against the exact sum (`#wrong` counts elements that differ).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_allreduce_worker.py")
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's tfringrun, without TensorFlow
from tfringrun import launcher  # noqa: E402

import _aims  # noqa: E402  (beside this file)


# tfring's job keeps about 3,700 names in flight from step to step: each step case runs three
# variants (unnamed, named, grouped) interleaved, 1000 tensors each in the largest. A
# training step of 1000 tensors fits the default cache (1024), but three of them taking
# turns would evict each other and be negotiated on every step, which is not what the step
# cases measure. Every other setting is tfring's default.
TFRING_JOB_CACHE_CAPACITY = 4096


def run_job(mode, args, mpi_yield=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    if mode == "tfring":
        env["TFRING_CACHE_CAPACITY"] = str(TFRING_JOB_CACHE_CAPACITY)
    if not args.no_huge_pages:  # as tfringrun starts ranks, for every job (like with like)
        env = launcher.with_huge_pages(env)
    if mode == "raw":
        env.pop("OMPI_MCA_mpi_yield_when_idle", None)  # Open MPI's own default
        if mpi_yield is not None:
            env["OMPI_MCA_mpi_yield_when_idle"] = mpi_yield
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        cmd = [os.path.join(BIN, "mpirun"), "-np", str(args.np), "--bind-to", "core",
               *shlex.split(args.mpirun_args),
               sys.executable, WORKER, mode, "--out", out, "--max-mib", str(args.max_mib)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"the {mode} job failed ({proc.returncode}):\n"
                               f"{(proc.stdout + proc.stderr)[-4000:]}")
        with open(out) as f:
            return json.load(f)


def busbw(nbytes, seconds, size):
    return nbytes / seconds / 1e9 * 2 * (size - 1) / size


def best_of(runs, section):
    """Per row and figure, the fastest of the raw-MPI runs (run before and after tfring's:
    the machine's speed drifts between sittings)."""
    out = {}
    for key in runs[0][section]:
        rows = [r[section][key] for r in runs]
        out[key] = {f: (max(r[f] for r in rows) if f == "wrong" else min(r[f] for r in rows))
                    for f in rows[0]}
    return out


def table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def print_sweep(raw, ring, yielding):
    size = ring["size"]
    defaults = best_of(raw, "raw_sweep")
    alone = yielding["raw_sweep"]
    print(f"# {size} ranks bound to cores, float32 Sum, eager, median per call (us); "
          f"{ring['mpi_version']}")
    print("# 'MPI beside': mpi4py in tfring's processes, interleaved with tfring's calls "
          "(the MPI settings tfring runs with); 'MPI defaults': mpi4py alone with Open MPI's "
          "defaults, best of a run before and one after; 'MPI yield': mpi4py alone with "
          "mpi_yield_when_idle=1, tfring's setting; 'MPI beside, 4K pages': beside, on arrays "
          "without transparent huge pages, as TensorFlow's tensors are (numpy asks for them "
          "from 4 MiB on)")
    rows = []
    for key, row in ring["tfring_sweep"].items():
        nbytes = int(key)
        best = defaults[key]["s"]
        bw = [busbw(nbytes, t, size) for t in (row["named"], row["unnamed"], row["mpi"], best)]
        rows.append([nbytes] + [f"{t * 1e6:.1f}" for t in (
            row["named"], row["unnamed"], row["mpi"], row["mpi_small_pages"], best,
            alone[key]["s"], row["tf_op"])] +
            [f"{b:.3f}" for b in bw] +
            [f"{row['mpi'] / row['named']:.2f}", f"{row['mpi'] / row['unnamed']:.2f}",
             f"{row['mpi_small_pages'] / row['named']:.2f}", f"{best / row['named']:.2f}",
             row["wrong"] + defaults[key]["wrong"] + alone[key]["wrong"]])
    table(["bytes", "named", "unnamed", "MPI beside", "MPI beside, 4K pages", "MPI defaults",
           "MPI yield", "TF op", "busbw named", "busbw unnamed", "busbw MPI beside",
           "busbw MPI defaults", "named/beside", "unnamed/beside", "named/beside 4K",
           "named/defaults", "#wrong"], rows)


def fit_line(points):
    """Least squares a + b x through (x, y) points: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = (sum((x - mx) * (y - my) for x, y in points) /
         sum((x - mx) ** 2 for x, _ in points))
    return my - b * mx, b


def print_steps(raw, ring):
    defaults = best_of(raw, "raw_steps")
    print("\n# one step inside a tf.function: n tensors of k KiB float32 (median step, ms)")
    rows = []
    for key, row in ring["tfring_steps"].items():
        n, kib = key.split("x")
        rows.append([f"{n} x {kib} KiB"] + [f"{t * 1e3:.3f}" for t in (
            row["unnamed"], row["named"], row["grouped"], row["tf_floor"], row["mpi_separate"],
            row["mpi_packed"], row["mpi_packing"], defaults[key]["mpi_separate"],
            defaults[key]["mpi_packed"])] +
            [f"{row['grouped'] / (row['mpi_packed'] + row['tf_floor']):.2f}",
             f"{row['grouped'] / (row['mpi_packing'] + row['tf_floor']):.2f}",
             row["wrong"] + defaults[key]["wrong"]])
    table(["step", "unnamed ops", "named ops", "grouped", "TF floor", "MPI separate beside",
           "MPI packed beside", "MPI packing + packed beside", "MPI separate defaults",
           "MPI packed defaults", "grouped / (packed + floor)",
           "grouped / (packing + packed + floor)", "#wrong"], rows)
    scaling = [k for k in ring["tfring_steps"] if k.endswith("x4")]
    if len(scaling) < 2:
        return {}
    print("\n# fixed cost per step and cost per tensor: a line through the steps of 4 KiB "
          "tensors")
    steps = ring["tfring_steps"]
    series = {
        "tfring, unnamed ops": [steps[k]["unnamed"] for k in scaling],
        "tfring, named ops": [steps[k]["named"] for k in scaling],
        "tfring, grouped": [steps[k]["grouped"] for k in scaling],
        "TF floor": [steps[k]["tf_floor"] for k in scaling],
        "MPI separate calls, beside": [steps[k]["mpi_separate"] for k in scaling],
        "MPI separate calls, defaults": [defaults[k]["mpi_separate"] for k in scaling],
    }
    counts = [int(k.split("x")[0]) for k in scaling]
    lines = {what: fit_line(list(zip(counts, times))) for what, times in series.items()}
    table(["what", "fixed us", "per tensor us"],
          [[what, f"{a * 1e6:.0f}", f"{b * 1e6:.1f}"] for what, (a, b) in lines.items()])
    return lines


def print_aims(ring, lines):
    print("\n# the aims against this run (bench/_aims.py): what TensorFlow itself costs "
          "beside each figure, and what tfring adds above it")
    table(_aims.HEADER, _aims.aim_rows(ring, lines))


def print_breakdown(result):
    print("\n# where the time of one call goes (us; phases: mean per tensor, from rank 0's "
          "timeline, on for this job only)")
    rows = []
    phase_names = ["SUBMIT", "NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE",
                   "MEMCPY_OUT_FUSION_BUFFER"]
    for case, row in result["breakdown"].items():
        phases = row["phases"]
        inside = sum(phases.get(p, 0.0) for p in phase_names)
        raw = row.get("raw op")
        cells = [case, row.get("tensors per call", 1), f"{row['call']:.1f}",
                 f"{row['TF op']:.1f}" if "TF op" in row else "",
                 f"{row['call'] - raw:.1f}" if raw else "",
                 f"{raw:.1f}" if raw else ""]
        cells += [f"{phases.get(p, 0.0):.1f}" for p in phase_names]
        cells.append(f"{raw - inside:.1f}" if raw else "")
        rows.append(cells)
    table(["case", "tensors", "call", "TF op", "tfring's Python", "raw op", "SUBMIT",
           "NEGOTIATE", "QUEUE", "copy in", "MPI", "copy out", "raw op outside the phases"],
          rows)
    print("# tfring's Python: the call minus the raw op (the op through TensorFlow's fast "
          "path, as tfring's eager call ends); outside the phases: TF's dispatch before the "
          "kernel starts and the hand-off back to TF after the op is done")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--max-mib", type=float, default=64)
    parser.add_argument("--json", help="also write both jobs' figures here")
    parser.add_argument("--mpirun-args", default="",
                        help="more options for every job's mpirun, as one string (e.g. "
                             "\"--with-ft ulfm\": the elastic mode's fault tolerance)")
    parser.add_argument("--no-huge-pages", action="store_true",
                        help="run every job without the transparent huge pages for malloc "
                             "that tfringrun asks glibc for (GLIBC_TUNABLES)")
    args = parser.parse_args()
    if args.no_huge_pages:
        print("# every job without tfringrun's huge pages for malloc (--no-huge-pages)")
    else:
        print(f"# every job with GLIBC_TUNABLES={launcher.HUGE_PAGES_TUNABLE}, as tfringrun "
              "starts ranks (--no-huge-pages: without)")
    print(f"# tfring's job with TFRING_CACHE_CAPACITY={TFRING_JOB_CACHE_CAPACITY}: its steps "
          "use about 3,700 names, three variants taking turns (bench/allreduce.py says why)")
    raw = [run_job("raw", args)]
    ring = run_job("tfring", args)
    raw.append(run_job("raw", args))
    yielding = run_job("raw", args, mpi_yield="1")
    parts = run_job("breakdown", args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"raw": raw, "tfring": ring, "raw_yield": yielding, "breakdown": parts},
                      f, indent=1)
    print_sweep(raw, ring, yielding)
    lines = print_steps(raw, ring)
    print_breakdown(parts)
    print_aims(ring, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
