"""Runs the whole test suite, stage by stage, and ends with one line: `suite: N passed, N failed`.

Stages: native runtime tests (threads as ranks; then MPI at 2 and 3 ranks; NCCL at one rank
per GPU, skipped with the reason where there is none), unit tests (one
process), parallel tests under mpirun at 2 and 3 ranks (Keras 3), the tf_keras tests under
mpirun with TF_USE_LEGACY_KERAS=1, the Adasum tests at 4 ranks, failure scenarios, jobs with init(comm=...) and mpi4py, the examples (each run under mpirun as
a user would), a job across two hosts made on this machine (tests/multihost). Every stage
has a timeout, and the parallel stages fail a collective that some rank never submits after
TFRING_STALL_SHUTDOWN_TIME_SECONDS, so a hang is a failure with a message. Full logs go to
build/test-logs/.
"""

import glob
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "build", "test-logs")
BIN = os.path.dirname(sys.executable)
MPIRUN = [os.path.join(BIN, "mpirun"), "--oversubscribe"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", "-q", "-rs"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def counts(text, rank0_prefix=None):
    """(passed, failed) from a pytest summary or the native harness's last line."""
    lines = text.splitlines()
    if rank0_prefix:
        lines = [l for l in lines if l.startswith(rank0_prefix)]
    for line in reversed(lines):
        if re.search(r"\d+ (passed|failed)", line):
            passed = re.search(r"(\d+) passed", line)
            failed = re.search(r"(\d+) (failed|error)", line)
            return int(passed.group(1)) if passed else 0, int(failed.group(1)) if failed else 0
    return 0, 0


# A tensor some ranks never submit fails after this long instead of hanging the stage.
PARALLEL_ENV = {"TFRING_STALL_CHECK_TIME_SECONDS": "20", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "60"}


def stage(name, cmd, timeout, rank0_prefix=None, env=None):
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, re.sub(r"\W+", "_", name) + ".log")
    start = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=dict(ENV, **(env or {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
        rc, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = -1, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
        out += f"\n[suite] TIMEOUT: {name} ran past {timeout} s and was killed\n"
    with open(log, "w") as f:
        f.write(out)
    passed, failed = counts(out, rank0_prefix)
    if rc != 0 and failed == 0:
        failed = 1  # a crash, a timeout or an abort counts as a failure
    status = "ok" if rc == 0 else f"FAILED (exit {rc})"
    print(f"[suite] {name}: {passed} passed, {failed} failed, {time.time() - start:.0f} s, "
          f"{status}  (log: {os.path.relpath(log, ROOT)})", flush=True)
    for line in out.splitlines():  # say what was skipped, and why
        if "SKIPPED" in line and (not rank0_prefix or line.startswith(rank0_prefix)):
            print(f"[suite]   {line.strip()}", flush=True)
    if rc != 0:
        print("\n".join(out.splitlines()[-60:]), flush=True)
    return passed, failed


def visible_gpus():
    """NVIDIA GPUs nvidia-smi lists (0 without the tool or a driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


# The native tests again, built with sanitizers (`python tfring/build.py --native-only
# --sanitize address|thread`; the Makefile's build does both). A report fails the test.
SANITIZER_ENV = {
    "address": {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0",  # MPI's own allocations
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"},
    # Open MPI's UCX intercepts memory calls, which crashes under ThreadSanitizer.
    "thread": {"TSAN_OPTIONS": "halt_on_error=1", "UCX_MEM_EVENTS": "no"},
}


def sanitized_stages():
    stages = []
    for kind, env in SANITIZER_ENV.items():
        exported = [a for k in env for a in ("-x", k)]
        for binary in sorted(glob.glob(os.path.join(ROOT, "build", f"tests-{kind}", "test_*"))):
            name = f"native {os.path.basename(binary)} [{kind}]"
            if "mpi" not in os.path.basename(binary):
                stages.append((name, [binary], 300, None, env))
            elif kind == "address":  # MPI itself is not built for ThreadSanitizer
                for n in (2, 3):
                    stages.append((f"{name} np={n}",
                                   MPIRUN + ["-np", str(n)] + exported + [binary], 300, None,
                                   env))
    return stages


def main():
    stages = []
    native = sorted(glob.glob(os.path.join(ROOT, "build", "tests", "test_*")))
    for binary in native:
        name = os.path.basename(binary)
        if "nccl" in name:
            # One rank per GPU; it skips (saying why) where no GPU is visible.
            n = str(max(1, visible_gpus()))
            stages.append((f"native {name} np={n}", MPIRUN + ["-np", n, binary], 300))
        elif "mpi" in name:
            for n in (2, 3):
                stages.append((f"native {name} np={n}", MPIRUN + ["-np", str(n), binary], 180))
        else:
            stages.append((f"native {name}", [binary], 180))
    stages += sanitized_stages()
    stages.append(("unit", PYTEST + ["tests/unit"], 600))
    for n in (2, 3):
        stages.append((f"parallel np={n}", MPIRUN + ["-np", str(n), "--tag-output"] + PYTEST +
                       ["-x", "tests/parallel"], 900, "[1,0]<stdout>", PARALLEL_ENV))
    stages.append(("parallel tf_keras np=2", MPIRUN + ["-np", "2", "--tag-output"] + PYTEST +
                   ["-x", "tests/parallel/test_tf_keras.py"], 600, "[1,0]<stdout>",
                   dict(PARALLEL_ENV, TF_USE_LEGACY_KERAS="1")))
    # Adasum's tree has a second level only from 4 ranks on.
    stages.append(("parallel adasum np=4", MPIRUN + ["-np", "4", "--tag-output"] + PYTEST +
                   ["-x", "tests/parallel/test_adasum.py"], 300, "[1,0]<stdout>", PARALLEL_ENV))
    stages.append(("failure", PYTEST + ["tests/failure"], 600))
    # Jobs of their own: init(comm=...) over part of MPI_COMM_WORLD, mpi4py beside tfring.
    stages.append(("jobs", PYTEST + ["tests/jobs"], 600))
    stages.append(("examples", PYTEST + ["tests/examples"], 600))
    # Two hosts made of network namespaces (skipped, saying why, where they cannot be made).
    stages.append(("multihost", PYTEST + ["tests/multihost"], 300))

    total_passed = total_failed = 0
    for spec in stages:
        passed, failed = stage(*spec)
        total_passed += passed
        total_failed += failed
    print(f"suite: {total_passed} passed, {total_failed} failed", flush=True)
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
