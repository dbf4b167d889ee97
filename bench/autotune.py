"""Autotune benchmark: steps/s of one job under hand-picked settings and under
TFRING_AUTOTUNE=1 (timed after it has chosen), on the same machine, one run each:

    python bench/autotune.py [--np 2] [--seconds 3]

Prints a table and the ratio of the autotuned rate to the best hand-picked one.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
HAND_PICKED = [(64, 1.0), (16, 0.25), (4, 1.0), (1, 4.0)]  # (fusion MiB, cycle ms)


def run(np_, seconds, env):
    cmd = [os.path.join(BIN, "mpirun"), "--oversubscribe", "-np", str(np_), "--bind-to", "core",
           sys.executable, os.path.join(HERE, "_autotune_worker.py"), str(seconds)]
    full = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                **env)
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("STEPS_PER_SECOND"):
            return float(line.split()[1])
    raise SystemExit(f"benchmark run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    rows = []
    for mib, ms in HAND_PICKED:
        rate = run(args.np, args.seconds, {"TFRING_FUSION_THRESHOLD": str(mib << 20),
                                           "TFRING_CYCLE_TIME": str(ms)})
        rows.append((f"fusion {mib} MiB, cycle {ms} ms", rate))
        print(f"{rows[-1][0]:<34} {rate:8.1f} steps/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "autotune.csv")
        rate = run(args.np, args.seconds, {"TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": log,
                                           "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.3"})
        chosen = list(csv.DictReader(open(log)))[-1]
    label = (f"autotuned: {int(chosen['fusion_threshold_bytes']) >> 20} MiB, "
             f"{float(chosen['cycle_time_ms'])} ms")
    print(f"{label:<34} {rate:8.1f} steps/s")
    best = max(r for _, r in rows)
    print(f"autotuned / best hand-picked: {rate / best:.2f}")


if __name__ == "__main__":
    main()
