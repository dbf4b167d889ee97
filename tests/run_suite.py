"""Runs the whole test suite, stage by stage, and ends with one line:
`suite: N passed, N failed, N skipped in T s`.

Stages, in order: native runtime tests (threads as ranks; then MPI at 2, 3 and 4 ranks; NCCL
at one rank per GPU where there are GPUs) while the same native tests are built with
AddressSanitizer+UBSan and with ThreadSanitizer at idle priority; the failure tests whose
bounds are tight, one at a time; unit tests (one process); the sanitized native tests, two
at a time, and beside them, where there is no GPU, the NCCL tests on the host GPU (CUDA and
NCCL emulated on the host, tests/cpp/host_gpu), then the GPU runtime compiled against CUDA
12's wheels (tools/cuda12_compile_check.py); parallel tests under mpirun at 2 ranks and,
those whose outcome depends on the job's size, at 3 (Keras 3); the tf_keras tests under mpirun with
TF_USE_LEGACY_KERAS=1 at 2 and 3 ranks alike; where nvidia-smi lists GPUs, TensorFlow's GPU
tests at one GPU per rank; the Adasum tests at 4 ranks; the other failure scenarios, jobs
with init(comm=...) and mpi4py, and the examples (each run under mpirun as a user would),
together, two at a time; a job across two hosts made on this machine (tests/multihost); a
Slurm cluster of two nodes on such hosts, launched through srun, sbatch and salloc
(tests/slurm).

What counts as a failure: a failed test; a crash or an abort; a stage past its timeout (its
whole process group is killed, so no rank of it lives on into the next stage); a stage that
ran no test (only the NCCL, GPU, multihost and Slurm stages may skip everything, saying
why); a native test binary the build should have made and did not. The parallel stages fail a collective
that some rank never submits after TFRING_STALL_SHUTDOWN_TIME_SECONDS, so a hang is a
failure with a message. Full logs go to build/test-logs/.
"""

import concurrent.futures
import functools
import glob
import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "build", "test-logs")
BIN = os.path.dirname(sys.executable)
MPIRUN = [os.path.join(BIN, "mpirun"), "--oversubscribe"]
# --durations: each stage's log lists its slowest tests, so that the suite's time is seen.
# -rsfE: what was skipped and why, and a line per failed test (the suite's last lines
# repeat those: CI shows only the end of its output).
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", "-q",
          "-rsfE", "--durations=15"]
# The stages whose tests each start processes of their own (builds, example scripts, failure
# scenarios) run two tests at a time: much of each test is a process starting or waiting.
# The failure scenarios whose bounds are tight run alone after (marked serial).
PYTEST_TWO_AT_A_TIME = PYTEST + ["-n", "2"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def counts(text, rank0_prefix=None):
    """(passed, failed, skipped) from a pytest summary or the native harness's last line."""
    lines = text.splitlines()
    if rank0_prefix:
        lines = [l for l in lines if l.startswith(rank0_prefix)]
    for line in reversed(lines):
        # A summary, not any line that says "N failed" (libevent's "Epoll MOD(4) on fd 21
        # failed." after a lost rank once read as 21 failed tests).
        if re.search(r"\d+ (passed|skipped)|\d+ (failed|errors?)( in |,|\s*$)", line):
            found = [re.search(rf"(\d+) {word}", line) for word in ("passed", "(failed|error)",
                                                                     "skipped")]
            return tuple(int(m.group(1)) if m else 0 for m in found)
    return 0, 0, 0


# A tensor some ranks never submit fails after this long instead of hanging the stage.
PARALLEL_ENV = {"TFRING_STALL_CHECK_TIME_SECONDS": "20", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "60"}
# Stages with more ranks than the machine has cores: TensorFlow's intra-op pool, one thread
# per core in every rank, only contends with the other ranks' (3 ranks on 2 cores: 10%
# faster with one thread, measured twice each way on 2026-12-01). The inter-op pool keeps 2:
# a kernel that blocks on a peer must not hold the only thread.
OVERSUBSCRIBED_ENV = dict(PARALLEL_ENV, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2")
# The tests of tf_keras (Keras 2), which run with TF_USE_LEGACY_KERAS=1 in stages of their own.
TF_KERAS_FILES = [f"tests/parallel/{name}.py" for name in (
    "test_tf_keras", "test_tf_keras_callbacks", "test_tf_keras_sharded",
    "test_tf_keras_legacy_sharded")]
# `make test-full` (TFRING_SUITE_FULL=1): what the default leaves out, too: every parallel
# test at 3 ranks, every tf_keras test at 3, and the failure tests marked full_only.
FULL = os.environ.get("TFRING_SUITE_FULL") == "1"
# Tests marked full_only repeat a default test's scenario in another flavour: `make
# test-full` runs them.
ONLY_DEFAULT = "" if FULL else " and not full_only"
SERIAL_FAILURES = ("failure serial", PYTEST + ["-m", "serial" + ONLY_DEFAULT, "tests/failure"],
                   300)


def run_stage_command(cmd, env, timeout):
    """(exit status, output). The command runs in a process group of its own, so that a
    timeout kills mpirun and every rank it started, not only the first process: no rank of
    a hung stage lives on into the next."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, (out or "") + f"\n[suite] TIMEOUT: ran past {timeout} s; its process group " \
                                 "was killed\n"


def stage(name, cmd, timeout, rank0_prefix=None, env=None, may_skip_all=False):
    """Runs one stage; returns (passed, failed, skipped). A stage that ran no test fails,
    unless it skipped them all and is one that may (no GPU, no network namespaces)."""
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, re.sub(r"\W+", "_", name) + ".log")
    start = time.time()
    rc, out = run_stage_command(cmd, dict(ENV, **(env or {})), timeout)
    passed, failed, skipped = counts(out, rank0_prefix)
    if rc == 0 and passed == 0 and not (skipped and may_skip_all):
        rc = 1
        out += (f"\n[suite] {name} ran no test ({skipped} skipped): a stage that is expected "
                "to run must run\n")
    with open(log, "w") as f:
        f.write(out)
    if rc != 0 and failed == 0:
        failed = 1  # a crash, a timeout, an abort or an empty stage counts as a failure
    status = "ok" if rc == 0 else f"FAILED (exit {rc})"
    report = [f"[suite] {name}: {passed} passed, {failed} failed, {skipped} skipped, "
              f"{time.time() - start:.0f} s, {status}  (log: {os.path.relpath(log, ROOT)})"]
    report += [f"[suite]   {line.strip()}" for line in out.splitlines()  # what was skipped, why
               if "SKIPPED" in line and (not rank0_prefix or line.startswith(rank0_prefix))]
    if rc != 0:
        report += out.splitlines()[-60:]
        failures = [line.strip() for line in out.splitlines()
                    if re.match(r"(\[\d+,\d+\]<stdout>: )?(FAILED|ERROR) ", line.strip())]
        _FAILED.extend(f"{name}: {line[:300]}" for line in (failures or [status]))
    with _PRINTING:  # stages that run side by side print their reports whole
        print("\n".join(report), flush=True)
    return passed, failed, skipped


_PRINTING = threading.Lock()
_FAILED = []  # "stage: what failed", repeated at the end of the suite's output


def stages_two_at_a_time(specs):
    """Runs stages two at a time (the sanitized native tests: each mostly waits on a timeout
    or on its ranks, not on the CPU); their (passed, failed, skipped), in order."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda spec: stage(*spec), specs))


class SanitizerBuilds:
    """The native tests' sanitized builds (`python tfring/build --native-only --sanitize
    address`, then thread), started in the background when the suite starts, at the lowest
    priority: they compile in the cycles the first stages leave idle (the plain native tests
    and the serial failure tests mostly wait: on timeouts, a batch gap, a killed rank), and
    take next to none from them. Incremental: nothing to do where they are built already."""

    def __init__(self):
        os.makedirs(LOGS, exist_ok=True)
        self.log = os.path.join(LOGS, "sanitizer_builds.log")
        self.start = time.time()
        script = " && ".join(f"{sys.executable} tfring/build --native-only --sanitize {kind}"
                             for kind in SANITIZER_ENV)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["nice", "-n", "19", "bash", "-c", script], cwd=ROOT,
                                         env=ENV, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        # Linux's autogroups share the CPU between sessions whatever their processes' nice
        # values: each stage is a session of its own (run_stage_command). The build's
        # session gets the lowest weight too, where the kernel has autogroups.
        try:
            with open(f"/proc/{self.proc.pid}/autogroup", "w") as f:
                f.write("19")
        except OSError:
            pass

    def wait(self, timeout=900):
        """Waits for the builds; returns the failures to count (0 or 1)."""
        try:
            rc = self.proc.wait(timeout=max(1, timeout - (time.time() - self.start)))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = -1
        with open(self.log) as f:
            out = f.read()
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        report = [f"[suite] sanitizer builds: {time.time() - self.start:.0f} s, {status}  "
                  f"(log: {os.path.relpath(self.log, ROOT)})"]
        if rc != 0:
            report += out.splitlines()[-60:]
        with _PRINTING:
            print("\n".join(report), flush=True)
        return 0 if rc == 0 else 1


def visible_gpus():
    """NVIDIA GPUs nvidia-smi lists (0 without the tool or a driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


# The native tests again, built with sanitizers (`python tfring/build --native-only
# --sanitize address|thread`: SanitizerBuilds). A report fails the test.
SANITIZER_ENV = {
    # detect_leaks=0: MPI's own allocations. detect_stack_use_after_return: a pointer to a
    # returned caller's stack (a submitter's OpCountdown kept past the op, op_countdown.h).
    "address": {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:detect_stack_use_after_return=1",
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"},
    # Open MPI's UCX intercepts memory calls, which crashes under ThreadSanitizer; PMIx's
    # shared-memory store cannot map at its fixed address under it (gds=hash instead); MPI's
    # own libraries are suppressed (not built for it).
    "thread": {"TSAN_OPTIONS": "halt_on_error=1 suppressions=" +
               os.path.join(ROOT, "tests", "cpp", "tsan_mpi.supp"),
               "UCX_MEM_EVENTS": "no", "PMIX_MCA_gds": "hash"},
}


def sanitized_stages():
    """Each sanitizer runs where it can find something (toolchain.built_under_sanitizer):
    ThreadSanitizer the in-process jobs, whose ranks are threads, and the global runtime's
    enqueue/shutdown race over MPI; AddressSanitizer every test; the MPI ones at 2 ranks (their memory use does not depend on the job's size; the plain
    build runs them at 2, 3 and 4)."""
    stages = []
    for kind, env in SANITIZER_ENV.items():
        exported = [a for k in env for a in ("-x", k)]
        for binary in sorted(glob.glob(os.path.join(ROOT, "build", f"tests-{kind}", "test_*"))):
            test = os.path.basename(binary)
            if not _toolchain().built_under_sanitizer(kind, test):
                continue  # left by an earlier build that made more of them
            name = f"native {test} [{kind}]"
            if "mpi" not in test:
                stages.append((name, [binary], 300, None, env))
            else:
                stages.append((f"{name} np=2", MPIRUN + ["-np", "2"] + exported + [binary], 300,
                               None, env))
    return stages


@functools.lru_cache(maxsize=None)
def _toolchain():
    """tfring/build/toolchain.py, loaded by path (importing tfring would import TensorFlow)."""
    spec = importlib.util.spec_from_file_location(
        "_suite_toolchain", os.path.join(ROOT, "tfring", "build", "toolchain.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_path_dropped():
    """Why the build made no GPU path although the gpu-build extra is installed (as in CI:
    then the host GPU's ten stages would quietly not run), or None."""
    record = _toolchain().read_record(_toolchain().entry_dir()) or {}
    if record.get("nccl"):
        return None
    try:
        importlib.metadata.version("nvidia-nccl-cu13")
    except importlib.metadata.PackageNotFoundError:
        return None  # not installed: a build without the GPU path is what was asked for
    return record.get("nccl_not_built_because") or "no build record"


def missing_native_binaries():
    """The native test binaries the build should have made and did not (names), and the host
    GPU's library where it is to run the NCCL tests."""
    record = _toolchain().read_record(_toolchain().entry_dir()) or {}
    sources = [os.path.basename(f)[:-3] for f in glob.glob(os.path.join(ROOT, "tests", "cpp",
                                                                          "test_*.cc"))]
    sources = [s for s in sources if s != "test_harness"]
    gpu = [s for s in sources if "nccl" in s or "cuda" in s]
    expected = {"tests": [s for s in sources if record.get("nccl") or s not in gpu]}
    for kind in SANITIZER_ENV:  # sanitizer builds have no GPU path
        expected[f"tests-{kind}"] = [s for s in sources if s not in gpu and
                                     _toolchain().built_under_sanitizer(kind, s)]
    if record.get("nccl") and not visible_gpus():  # the NCCL tests run on the host GPU
        expected["tests/host_gpu"] = ["libtfring_host_gpu.so"]
    return [f"build/{folder}/{name}" for folder, names in expected.items() for name in names
            if not os.path.exists(os.path.join(ROOT, "build", folder, name))]


HOST_GPU = os.path.join(ROOT, "build", "tests", "host_gpu")
# The GPU runtime compiled (syntax only) against the CUDA 12 wheels TensorFlow's GPU build
# runs with, oldest and newest; the build itself compiles it against CUDA 13's.
CUDA12_COMPILE = ("GPU runtime against CUDA 12's wheels",
                  [sys.executable, os.path.join(ROOT, "tools", "cuda12_compile_check.py")], 600)


def host_gpu_stages():
    """Where no GPU is visible, the NCCL executor's native tests on the host GPU
    (tests/cpp/host_gpu/host_gpu.h: CUDA and NCCL emulated on the host, the library each
    rank's calls go to), through tools/gpu_ranks.sh as on a one-GPU machine: the ordering, fusion, every
    collective's offsets and the failure funnel, at 2 and 3 ranks, and 4 as two hosts; two
    ranks on one GPU; and the elastic scenarios under ULFM (a rank killed mid-allreduce, the
    survivors' world shrunk, a worker joining), with NCCL's reshaping calls, and the reset
    made anew without them (TFRING_NCCL_RESHAPE=off)."""
    library = os.path.join(HOST_GPU, "libtfring_host_gpu.so")
    if visible_gpus() or not glob.glob(os.path.join(ROOT, "build", "tests", "test_nccl_*")):
        return []  # a GPU runs them natively; a build without NCCL has none
    # tfring's calls go to the files these name (backends/nccl/nccl_library.h); the driver,
    # libcuda.so.1 beside it, is found on the library path.
    chosen = {"TFRING_NCCL_LIBRARY": library, "TFRING_CUDA_RUNTIME_LIBRARY": library,
              "LD_LIBRARY_PATH": HOST_GPU}
    exported = [word for k, v in chosen.items() for word in ("-x", f"{k}={v}")]
    ulfm = ["--with-ft", "ulfm", "-x", "TFRING_NCCL_RESHAPE"]
    # (binary, ranks, its arguments, settings, mpirun's own flags)
    runs = [("test_nccl_runtime", 2, [], {}, []), ("test_nccl_runtime", 3, [], {}, []),
            ("test_nccl_runtime", 4, ["--filter=Hierarchical"], {"RANKS_PER_HOST": "2"}, []),
            ("test_nccl_global_runtime", 3, [], {}, []), ("test_nccl_kept_world", 1, [], {}, []),
            # 16 MiB at 20 MB/s a connection: the allreduce lasts a second, the kill comes
            # at 300 ms; the restart and the shrunk world are required here.
            ("scenario_nccl_peer_killed", 3, [], {"TFRING_NCCL_RESHAPE": "auto",
                                                  "TFRING_TEST_BIG_MIB": "16",
                                                  "TFRING_HOST_GPU_MB_PER_SECOND": "20",
                                                  "TFRING_TEST_KILL_AFTER_MS": "300",
                                                  "TFRING_TEST_EXPECT_RESTART": "1"},
             ulfm + ["-x", "TFRING_TEST_BIG_MIB", "-x", "TFRING_HOST_GPU_MB_PER_SECOND",
                     "-x", "TFRING_TEST_KILL_AFTER_MS", "-x", "TFRING_TEST_EXPECT_RESTART"]),
            # A rank stopped 300 ms into it: only tfring's GPU peer timeout (3 s) ends it.
            ("scenario_nccl_peer_stopped", 3, [], {"TFRING_TEST_BIG_MIB": "16",
                                                   "TFRING_HOST_GPU_MB_PER_SECOND": "20"},
             ulfm + ["-x", "TFRING_TEST_BIG_MIB", "-x", "TFRING_HOST_GPU_MB_PER_SECOND"]),
            # Each rank a host of its own (tools/gpu_ranks.sh): the killed rank's closed
            # connections make the survivors' idle world report ncclRemoteError, as NCCL's
            # proxy does, so it is not reused (made anew); within one host (below) the loss
            # is silent and the world is shrunk.
            ("scenario_nccl_reset", 3, [], {"TFRING_NCCL_RESHAPE": "auto",
                                            "TFRING_TEST_EXPECT_WORLD": "made anew"},
             ulfm + ["-x", "TFRING_TEST_EXPECT_WORLD"]),
            ("scenario_nccl_reset", 3, [], {"TFRING_NCCL_RESHAPE": "off"}, ulfm),
            # The joining worker is spawned by MPI's daemon, which passes on its own
            # environment, not mpirun's -x: the settings go to mpirun itself.
            ("scenario_nccl_grow", 2, [], dict(chosen, TFRING_NCCL_RESHAPE="auto"), ulfm)]
    # tfring's fallbacks where NCCL's reshaping calls fail or never end on one rank (the host
    # GPU's TFRING_HOST_GPU_RESHAPE_FAULT): every rank makes its world anew.
    killed = next(r for r in runs if r[0] == "scenario_nccl_peer_killed")
    faults = ["-x", "TFRING_HOST_GPU_RESHAPE_FAULT", "-x", "TFRING_TEST_EXPECT_WORLD"]
    for binary, n, base, fault in (
            ("scenario_nccl_peer_killed", 3, killed[3], "ncclCommRevoke:fail@0"),
            ("scenario_nccl_peer_killed", 3, killed[3], "ncclCommRevoke:stall@0"),
            ("scenario_nccl_grow", 2, dict(chosen, TFRING_NCCL_RESHAPE="auto"),
             "ncclCommGrow:fail@0")):
        flags = killed[4] if binary == killed[0] else ulfm
        runs.append((binary, n, [], dict(base, TFRING_HOST_GPU_RESHAPE_FAULT=fault,
                                          TFRING_TEST_EXPECT_WORLD="made anew"),
                     flags + ([] if "TFRING_NCCL_LIBRARY" in base else faults)))
    stages = []
    for binary, n, args, env, flags in runs:
        command = [os.path.join(ROOT, "tools", "gpu_ranks.sh"), str(n),
                   os.path.join(ROOT, "build", "tests", binary), "--timeout_seconds=120"] + args
        mpirun = " ".join(MPIRUN + flags + ([] if "TFRING_NCCL_LIBRARY" in env else exported))
        setting = f" {env['TFRING_NCCL_RESHAPE']}" if "TFRING_NCCL_RESHAPE" in env else ""
        if "TFRING_HOST_GPU_RESHAPE_FAULT" in env:
            setting += f", {env['TFRING_HOST_GPU_RESHAPE_FAULT']}"
        stages.append((f"native {binary} np={n}{setting} [host GPU]", command, 180, None,
                       dict(env, MPIRUN=mpirun)))
    # Three ranks of one host, each on a GPU of its own (no NCCL_HOSTID): a lost rank is
    # silent there, so the survivors' world is shrunk; and where the shrink fails on one
    # rank, every rank makes it anew.
    for fault, expected in (("", ""), ("ncclCommShrink:fail@1", "made anew")):
        settings = {"TFRING_NCCL_RESHAPE": "auto", "TFRING_HOST_GPU_RESHAPE_FAULT": fault,
                    "TFRING_TEST_EXPECT_WORLD": expected}
        stages.append((f"native scenario_nccl_reset np=3 auto{', ' + fault if fault else ''}, "
                       "one host [host GPU]",
                       MPIRUN + ulfm + ["-np", "3", "-x", "TFRING_HOST_GPU_COUNT=3",
                                        "-x", "TFRING_TEST_SHARE_GPU=1"] + faults + exported +
                       [os.path.join(ROOT, "build", "tests", "scenario_nccl_reset"),
                        "--timeout_seconds=90"], 180, None, settings))
    # Two ranks of one host on one GPU, as an unpinned script puts them (no NCCL_HOSTID).
    stages.append(("native scenario_nccl_shared_gpu np=2 [host GPU]",
                   MPIRUN + ["-np", "2", "-x", "TFRING_TEST_SHARE_GPU=1"] + exported +
                   [os.path.join(ROOT, "build", "tests", "scenario_nccl_shared_gpu")], 180))
    return stages


def native_stages():
    """The plain build's native tests (`make build` makes them)."""
    stages = []
    for binary in sorted(glob.glob(os.path.join(ROOT, "build", "tests", "test_*"))):
        name = os.path.basename(binary)
        if "nccl" in name:
            gpus = visible_gpus()
            if gpus:  # one rank per GPU; without one, host_gpu_stages() runs it
                stages.append((f"native {name} np={gpus}", MPIRUN + ["-np", str(gpus), binary],
                               300, None, None, True))
            elif name == "test_nccl_kept_world":  # needs no GPU: the NCCL tfring was built with
                stages.append((f"native {name} [the built NCCL]", [binary], 60))
        elif "mpi" in name:
            for n in (2, 3, 4):
                stages.append((f"native {name} np={n}", MPIRUN + ["-np", str(n), binary], 180))
        else:
            stages.append((f"native {name}", [binary], 180))
    return stages


def main():
    started = time.time()
    builds = SanitizerBuilds()
    results = [stage(*spec) for spec in native_stages()]
    # The failure tests whose bounds are seconds from an event (a kill, a stop) run alone
    # (tests/failure/conftest.py): here, beside the builds' idle-priority compiles only.
    results.append(stage(*SERIAL_FAILURES))
    # Single-process tests; the builds, if not done yet, take the cycles they leave.
    results.append(stage("unit", PYTEST_TWO_AT_A_TIME + ["tests/unit"], 600))
    results.append((0, builds.wait(), 0))
    missing = missing_native_binaries()
    if missing:
        print(f"[suite] native binaries the build should have made are missing: "
              f"{', '.join(sorted(missing))} (make test builds them)", flush=True)
    results.append((0, len(missing), 0))
    dropped = gpu_path_dropped()
    if dropped:
        print(f"[suite] the gpu-build extra is installed but the build made no GPU path "
              f"({dropped}): the NCCL tests cannot run", flush=True)
    results.append((0, int(bool(dropped)), 0))
    # The NCCL tests on the host GPU beside the sanitized ones: both mostly wait (on
    # timeouts, peers, sockets), and the host GPU's would add half a minute alone.
    with concurrent.futures.ThreadPoolExecutor(1) as beside:
        host_gpu = beside.submit(lambda: [stage(*spec) for spec in host_gpu_stages()] +
                                 [stage(*CUDA12_COMPILE)])
        results += stages_two_at_a_time(sanitized_stages())
        results += host_gpu.result()
    stages = []
    stages.append(("parallel np=2", MPIRUN + ["-np", "2", "--tag-output"] + PYTEST +
                   ["-x", "tests/parallel"], 900, "[1,0]<stdout>", PARALLEL_ENV))
    # At 3 ranks, the tests whose outcome depends on the job's size (tests/parallel/conftest.py
    # marks them); `make test-full` runs them all.
    stages.append(("parallel np=3", MPIRUN + ["-np", "3", "--tag-output"] + PYTEST +
                   ["-x", "tests/parallel"] + ([] if FULL else ["--size-dependent"]), 900,
                   "[1,0]<stdout>", OVERSUBSCRIBED_ENV))
    stages.append(("parallel tf_keras np=2", MPIRUN + ["-np", "2", "--tag-output"] + PYTEST +
                   ["-x"] + TF_KERAS_FILES, 600, "[1,0]<stdout>",
                   dict(PARALLEL_ENV, TF_USE_LEGACY_KERAS="1")))
    # At 3 ranks, the tf_keras tests whose outcome depends on the job's size (marked in
    # tests/parallel/conftest.py: sharded blocks split unevenly, one fit against one process,
    # the counts of accumulation); `make test-full` runs them all.
    stages.append(("parallel tf_keras np=3", MPIRUN + ["-np", "3", "--tag-output"] +
                   PYTEST + ["-x"] + ([] if FULL else ["--size-dependent"]) + TF_KERAS_FILES,
                   400, "[1,0]<stdout>", dict(OVERSUBSCRIBED_ENV, TF_USE_LEGACY_KERAS="1")))
    # TensorFlow's GPU kernels, where nvidia-smi lists GPUs: one GPU per rank, pinned by
    # tests/parallel/conftest.py (the other parallel stages hide the GPUs). Not added
    # elsewhere: there it could only skip.
    gpus = visible_gpus()
    if gpus:
        n = str(min(2, gpus))
        stages.append((f"parallel gpu np={n}", MPIRUN + ["-np", n, "--tag-output"] + PYTEST +
                       ["-x", "tests/parallel/test_gpu.py"], 600, "[1,0]<stdout>",
                       dict(PARALLEL_ENV, TFRING_TEST_GPU="1"), True))
    # Adasum's tree has a second level only from 4 ranks on.
    stages.append(("parallel adasum np=4", MPIRUN + ["-np", "4", "--tag-output"] + PYTEST +
                   ["-x", "tests/parallel/test_adasum.py"], 300, "[1,0]<stdout>",
                   OVERSUBSCRIBED_ENV))
    # The failure scenarios but the serial ones (run first), jobs of their own (init(comm=...)
    # over part of MPI_COMM_WORLD, mpi4py beside tfring) and the examples, each run under
    # mpirun as a user would: one two-at-a-time run, as most of each test is processes
    # starting, so that long tests and short ones fill each other's gaps.
    stages.append(("failure, jobs and examples",
                   PYTEST_TWO_AT_A_TIME + ["-m", "not serial" + ONLY_DEFAULT, "tests/failure",
                                           "tests/jobs", "tests/examples"], 1200))
    results += [stage(*spec) for spec in stages]
    # Two hosts made of network namespaces (skipped, saying why, where they cannot be made),
    # and a Slurm cluster of two nodes on hosts of its own (skipped, naming the missing
    # package, where Slurm is not installed; failed instead under
    # TFRING_SUITE_REQUIRE_SLURM=1, as in CI): side by side, as each waits on its daemons and
    # launchers as much as it computes; their namespaces and ports never meet.
    results += stages_two_at_a_time([
        ("multihost", PYTEST + ["tests/multihost"], 300, None, None, True),
        ("slurm", PYTEST + ["tests/slurm"], 400, None, None, True)])
    total_passed, total_failed, total_skipped = (sum(r[i] for r in results) for i in range(3))
    for line in _FAILED:
        print(f"[suite] failed: {line}", flush=True)
    print(f"suite: {total_passed} passed, {total_failed} failed, {total_skipped} skipped "
          f"in {time.time() - started:.0f} s", flush=True)
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
