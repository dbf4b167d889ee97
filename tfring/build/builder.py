"""Builds tfring's C++ library against the TensorFlow and MPI of this environment.

    python -m tfring.build                # the library, into this environment's build entry
    python -m tfring.build --tests        # also the native runtime tests, in build/tests/,
                                          # and the benchmarks' own ops, in build/bench/
    python -m tfring.build --where        # print the entry folder, build nothing
    python tfring/build --native-only     # runtime + native tests; as a script, needs no TF

`import tfring` runs the same build when the library is missing or stale (BUILD.md, 'When you
import tfring'); the command is for building ahead, and for the native tests of a checkout.
The entry folder (`toolchain.entry_dir`) is one per TensorFlow, MPI, NCCL and Python; a
file lock in it makes concurrent builders (every rank of a job importing tfring at once)
build once.

The GPU path (NCCL backend, GPU kernels) is built when NCCL and the CUDA runtime headers are
found (the `tfring[gpu]` extra installs both from PyPI); TFRING_WITH_NCCL=1 requires it,
TFRING_WITH_NCCL=0 skips it.

Incremental: an object is recompiled only when its source, a header it includes, or the
compiler flags changed. Compiles run in parallel. BUILD.md explains every step and what to
do when one fails.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time

if __package__:
    from tfring.build import entry_lock, toolchain
else:  # `python tfring/build --native-only`: a script beside toolchain.py, no TF import
    import entry_lock
    import toolchain
BuildError = toolchain.BuildError
find_mpicxx = toolchain.find_mpicxx
find_gpu_toolchain = toolchain.find_gpu_toolchain
EntryLock = entry_lock.EntryLock  # on_import.py takes it from here

ROOT = toolchain.ROOT
KERNELS = toolchain.KERNELS
CHECKOUT_BUILD_DIR = os.path.join(ROOT, "build")  # native tests and benchmarks (checkout only)
TOOL_TIMEOUT_SECONDS = 900  # one compile takes seconds; a compiler this slow is hung

# Folders whose code must not include TensorFlow (docs/architecture.md): compiled without TF
# headers. The first two must not include MPI or CUDA either: compiled with the plain
# compiler (toolchain.plain_compiler) and none of their flags.
PLAIN_DIRS = ["common", "core"]
RUNTIME_DIRS = PLAIN_DIRS + ["backends/mpi", "runtime"]
GPU_RUNTIME_DIRS = ["backends/cuda", "backends/nccl"]  # GPU builds only
TF_GLUE_DIR = "tf"
TF_GPU_GLUE_DIR = "tf/gpu"  # GPU builds only
TF_XLA_GLUE_DIR = "tf/xla"  # where TensorFlow's wheel has XLA's headers (toolchain.find_xla_toolchain)
# Ranks as threads of one process, for the native tests and benchmarks: test support, not
# shipped (tests/cpp/inproc).
INPROC_DIR = os.path.join(ROOT, "tests", "cpp", "inproc")
NATIVE_BENCH_DIR = os.path.join(ROOT, "bench", "native")  # built with the native tests
# TensorFlow ops that only the benchmarks use (bench/_bench_ops.py loads them): a library of
# their own beside the benchmarks, never part of the shipped one.
BENCH_OPS_DIR = os.path.join(ROOT, "bench", "ops")
BENCH_OPS_LIBRARY = os.path.join(CHECKOUT_BUILD_DIR, "bench", "libtfring_bench_ops.so")
# Native test and benchmark sources that need CUDA and NCCL: built in GPU builds only.
GPU_TEST_MARKERS = ("nccl", "cuda")
# What the native benchmarks link beside the runtime: the in-process backend and ranks.
BENCH_SUPPORT = [os.path.join(ROOT, "tests", "cpp", f)
                 for f in ("inproc_job.cc", "fake_device_memory.cc")]
# The host GPU (tests/cpp/host_gpu/host_gpu.h): CUDA and NCCL emulated on the host, so that
# the native GPU tests run without a GPU. GPU builds with tests; preloaded, never linked.
HOST_GPU_DIR = os.path.join(ROOT, "tests", "cpp", "host_gpu")
HOST_GPU_LIBRARY = os.path.join(CHECKOUT_BUILD_DIR, "tests", "host_gpu", "libtfring_host_gpu.so")
# Stand-ins for the bindings test (tests/unit/test_gpu_bindings.py): TensorFlow's GPU build's
# trampolines, and an NCCL loaded before tfring's. Each source is a library named for its SONAME.
GPU_STANDINS_DIR = os.path.join(ROOT, "tests", "cpp", "gpu_standins")
GPU_STANDINS = {"trampolines.cc": "libtfring_test_trampolines.so", "foreign_nccl.cc": "libnccl.so.2"}


def tensorflow_flags():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the build log about the build
    try:
        import tensorflow as tf
    except ImportError as e:
        raise BuildError(
            f"TensorFlow is not importable ({e}). Install it first: "
            "`pip install 'tfring[cpu]'` or `'tfring[gpu]'`, or TensorFlow 2.16+ yourself."
            ) from e
    return tf.__version__, tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def sources(subdir):
    folder = subdir if os.path.isabs(subdir) else os.path.join(KERNELS, subdir)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".cc"))


def object_path(obj_dir, source):
    rel = os.path.relpath(source, ROOT)
    return os.path.join(obj_dir, rel[:-3] + ".o")


def up_to_date(obj, flags_digest):
    dep, stamp = obj[:-2] + ".d", obj[:-2] + ".flags"
    if not (os.path.exists(obj) and os.path.exists(dep) and os.path.exists(stamp)):
        return False
    if open(stamp).read() != flags_digest:
        return False
    obj_time = os.path.getmtime(obj)
    with open(dep) as f:
        text = f.read().replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else []
    return all(os.path.exists(d) and os.path.getmtime(d) <= obj_time for d in deps)


def compile_one(obj_dir, compiler, flags, source):
    obj = object_path(obj_dir, source)
    digest = hashlib.sha256(" ".join([compiler] + flags).encode()).hexdigest()
    if up_to_date(obj, digest):
        return obj, False
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    # The stamp goes first and comes back last: a compile killed half-way (a job torn down
    # while one rank builds) leaves an object without a stamp, which the next build redoes.
    remove_if_exists(obj[:-2] + ".flags")
    cmd = [compiler] + flags + ["-MMD", "-MF", obj[:-2] + ".d", "-c", source, "-o", obj]
    _run_tool(cmd, f"compiling {os.path.relpath(source, ROOT)}")
    with open(obj[:-2] + ".flags", "w") as f:
        f.write(digest)
    return obj, True


def remove_if_exists(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _run_tool(cmd, what):
    """Runs a compiler or linker; a failure (or one still running after
    TOOL_TIMEOUT_SECONDS: a hung compiler) is a BuildError with its command and output."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} ran for more than {TOOL_TIMEOUT_SECONDS} s and was "
                         f"stopped:\n$ {shlex.join(cmd)}") from None
    except OSError as e:
        raise BuildError(f"{what} could not start ({e}):\n$ {shlex.join(cmd)}") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed:\n$ {shlex.join(cmd)}\n{proc.stderr[-6000:]}")


def compile_all(obj_dir, jobs, optional=()):
    """jobs: list of (compiler, flags, source). Returns objects in order; counts rebuilt.
    A job whose source is in `optional` and fails gives its BuildError in place of its
    object; any other failure raises."""
    def one(job):
        try:
            return compile_one(obj_dir, *job)
        except BuildError as e:
            if job[2] not in optional:
                raise
            return e, False

    workers = max(1, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(one, job) for job in jobs]
        try:
            for done in concurrent.futures.as_completed(futures):
                done.result()
        except BuildError:
            # The first failure ends the build: the compiles still queued are called off
            # (those running finish), so that a broken build fails in seconds, not minutes.
            for future in futures:
                future.cancel()
            raise
    results = [future.result() for future in futures]
    return [obj for obj, _ in results], sum(1 for _, rebuilt in results if rebuilt)


def link(compiler, objects, out, extra):
    """Links `out` unless it is newer than every object and was linked from the same objects
    with the same command (a removed source or a changed flag relinks). The new file
    replaces the old one in one rename, so a process that loads it never sees half a
    library."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # Hidden, so that globs over the outputs (build/tests/test_*) see only the outputs.
    stamp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.link")
    digest = hashlib.sha256(" ".join([compiler] + objects + extra).encode()).hexdigest()
    if os.path.exists(out) and os.path.exists(stamp) and open(stamp).read() == digest and \
            all(os.path.getmtime(o) <= os.path.getmtime(out) for o in objects):
        return False
    partial = f"{out}.partial-{os.getpid()}"
    _run_tool([compiler] + objects + ["-o", partial] + extra, f"linking {os.path.basename(out)}")
    os.replace(partial, out)
    with open(stamp, "w") as f:
        f.write(digest)
    return True


def write_json(path, value):
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "w") as f:
        json.dump(value, f, indent=2)
    os.replace(partial, path)


def mpi_version(mpicxx):
    mpirun = os.path.join(os.path.dirname(mpicxx), "mpirun")
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def test_sources(gpu):
    test_dir = os.path.join(ROOT, "tests", "cpp")
    files = sorted(f for f in os.listdir(test_dir) if f.endswith(".cc"))
    if not gpu:
        files = [f for f in files if not any(m in f for m in GPU_TEST_MARKERS)]
    return [os.path.join(test_dir, f) for f in files]


# Sanitizer builds of the native tests (`--sanitize`, `make sanitize`): compile and link flags.
SANITIZERS = {
    "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"],
    "thread": ["-fsanitize=thread"],
}


def build(entry=None, with_tests=False, native_only=False, say=print, sanitize=None):
    """Builds the library into `entry` (this environment's entry by default) and returns its
    record (build_info.json). The caller holds the entry's lock when other processes may
    build the same entry; main() does. sanitize ("address" or "thread", native_only only):
    the native tests with that sanitizer, into build/tests-<sanitize>/, without the GPU path."""
    start = time.time()
    mpicxx = find_mpicxx()
    gpu, gpu_reason = find_gpu_toolchain() if not sanitize else (None, f"a {sanitize} build")
    common = ["-O2", "-fPIC", "-Wall", "-Wno-sign-compare", f"-I{ROOT}"]
    plain_cxx = toolchain.plain_compiler(mpicxx)
    gpu_flags = gpu.compile_flags() if gpu else []
    tests_dir = os.path.join(CHECKOUT_BUILD_DIR, "tests")
    extra_link = []
    if sanitize:
        if not native_only:
            raise BuildError("--sanitize builds the native tests only (with --native-only)")
        extra_link = SANITIZERS[sanitize]
        # Line tables (-g1) are all a report needs to name file and line; full debug info
        # made the sanitized compiles half again as slow. AddressSanitizer+UBSan at -O0:
        # its compiles take 40% less than at -O1 (2026-12-02, 2 cores: 45 s instead of 61 s
        # for the native tests), and its tests run in seconds either way.
        optimize = ["-O0"] if sanitize == "address" else ["-O1"]
        common = optimize + ["-g1", "-fno-omit-frame-pointer"] + common[1:] + extra_link
        tests_dir = os.path.join(CHECKOUT_BUILD_DIR, f"tests-{sanitize}")
    xla, xla_reason = None, "a native-only build"
    if native_only:
        # No TensorFlow here (a GPU machine may lack it): the runtime alone, with the
        # compiler's default ABI, and its native tests.
        tf_version, tf_compile, tf_link = None, ["-std=c++17"], []
        with_tests = True
        obj_dir = os.path.join(CHECKOUT_BUILD_DIR,
                               f"native-obj-{sanitize}" if sanitize else "native-obj")
    else:
        tf_version, tf_compile, tf_link = tensorflow_flags()
        xla, xla_reason = toolchain.find_xla_toolchain(toolchain.tensorflow_dir())
        entry = entry or toolchain.entry_dir()
        obj_dir = os.path.join(entry, "obj")
    if with_tests and not toolchain.is_checkout():
        raise BuildError("the native tests are built from a source checkout (tests/cpp/), "
                         f"and {ROOT} is not one.")
    # The runtime gets TF's ABI and language flags but not its include paths
    # (docs/architecture.md: the runtime knows nothing of TensorFlow); the glue gets all.
    abi_flags = [f for f in tf_compile if not f.startswith("-I")]
    plain_flags = common + abi_flags
    runtime_flags = common + gpu_flags + abi_flags
    # TF's headers as system headers: their own warnings are not ours to read.
    tf_includes = ["-isystem" + f[2:] if f.startswith("-I") else f for f in tf_compile]
    glue_flags = common + gpu_flags + tf_includes
    runtime_dirs = RUNTIME_DIRS + (GPU_RUNTIME_DIRS if gpu else [])
    glue_dirs = [] if native_only else [TF_GLUE_DIR] + ([TF_GPU_GLUE_DIR] if gpu else [])
    jobs = [(plain_cxx, plain_flags, s) if d in PLAIN_DIRS else (mpicxx, runtime_flags, s)
            for d in runtime_dirs for s in sources(d)]
    jobs += [(mpicxx, glue_flags, s) for d in glue_dirs for s in sources(d)]
    xla_sources = sources(TF_XLA_GLUE_DIR) if xla else []
    jobs += [(mpicxx, glue_flags + xla[0], s) for s in xla_sources]
    # Native tests exist in a checkout only (an installed tfring has no tests/).
    test_files = test_sources(gpu) if with_tests else []
    if sanitize:  # only the binaries that sanitizer can find something in
        test_files = [f for f in test_files if not is_test_binary(f) or
                      toolchain.built_under_sanitizer(sanitize, os.path.basename(f)[:-3])]
    if with_tests:
        jobs += [(mpicxx, runtime_flags, s) for s in sources(INPROC_DIR)]
        jobs += [(mpicxx, runtime_flags, s) for s in test_files]
        if not sanitize:
            jobs += [(mpicxx, runtime_flags, s) for s in bench_sources(gpu)]
        if not native_only:
            jobs += [(mpicxx, glue_flags, s) for s in sources(BENCH_OPS_DIR)]
    host_gpu = sources(HOST_GPU_DIR) if with_tests and gpu and not sanitize else []
    jobs += [(plain_cxx, plain_flags + gpu_flags, s) for s in host_gpu]
    standins = sources(GPU_STANDINS_DIR) if host_gpu else []
    jobs += [(plain_cxx, plain_flags + gpu_flags, s) for s in standins]
    # The XLA lowerings' headers moved between TensorFlow releases: where they fail to
    # compile (and TFRING_WITH_XLA is not 1), the library is built without them, its record
    # says why, and tfring keeps XLA off for steps with its ops.
    # The host GPU is test support: where it does not compile, the suite goes without it.
    optional = tuple(() if toolchain.xla_required() else xla_sources) + tuple(host_gpu)
    objects, rebuilt = compile_all(obj_dir, jobs, optional)
    by_source = {j[2]: o for j, o in zip(jobs, objects)}
    failed = [by_source[s] for s in xla_sources if isinstance(by_source[s], BuildError)]
    if failed:
        first = next((l for l in str(failed[0]).splitlines() if "error" in l),
                     str(failed[0]).splitlines()[0])
        xla, xla_reason = None, f"its sources did not compile against this TensorFlow: {first}"
        xla_sources = []
    xla_link = xla[1] if xla else []
    runtime_objs = [by_source[s] for d in runtime_dirs for s in sources(d)]
    glue_objs = [by_source[s] for d in glue_dirs for s in sources(d)]
    glue_objs += [by_source[s] for s in xla_sources]
    gpu_link = gpu.link_flags() if gpu else []
    if with_tests:
        build_native_tests(mpicxx, by_source, runtime_objs, test_files,
                           gpu_link + extra_link, tests_dir)
        if not sanitize:
            build_native_benches(mpicxx, by_source, runtime_objs, bench_sources(gpu), gpu_link)
        if host_gpu:
            link_host_gpu(plain_cxx, [by_source[s] for s in host_gpu], say)
        for source in standins:
            name = GPU_STANDINS[os.path.basename(source)]
            link(plain_cxx, [by_source[source]],
                 os.path.join(CHECKOUT_BUILD_DIR, "tests", "gpu_standins", name),
                 ["-shared", f"-Wl,-soname,{name}"])
        if not native_only:
            link(mpicxx, [by_source[s] for s in sources(BENCH_OPS_DIR)], BENCH_OPS_LIBRARY,
                 ["-shared"] + tf_link)
    nccl_note = (f"NCCL {gpu.nccl_version()}: built" if gpu else f"NCCL: not built, {gpu_reason}")
    if native_only:
        say(f"tfring: built the native tests in {tests_dir} without TensorFlow "
            f"({nccl_note}) in {time.time() - start:.1f} s, "
            f"{rebuilt} of {len(objects)} files compiled")
        return None
    library = os.path.join(entry, toolchain.LIBRARY_NAME)
    link(mpicxx, runtime_objs + glue_objs, library, ["-shared"] + tf_link + xla_link + gpu_link)
    if gpu:
        check_gpu_calls_are_tfrings(library)
    record = {
        "library": library,
        "tensorflow": tf_version,
        "python": sys.version.split()[0],
        "mpi": True,
        "mpi_version": mpi_version(mpicxx),
        "mpicxx": mpicxx,
        "nccl": bool(gpu),
        "nccl_version": gpu.nccl_version() if gpu else None,
        "nccl_library": gpu.nccl_lib if gpu else None,
        "cuda_runtime_library": gpu.cudart_lib if gpu else None,
        "nccl_not_built_because": None if gpu else gpu_reason,
        # Whether tfring's ops run inside XLA-compiled functions (kernels/tf/xla).
        "xla": bool(xla),
        "xla_not_built_because": None if xla else xla_reason,
        # What `pip` calls this TensorFlow, for tfringrun --check-build (no TF import there).
        "tensorflow_distribution": toolchain.tensorflow_distribution()[1],
        "sources": toolchain.source_digest(),
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "build_seconds": round(time.time() - start, 1),
        "files_compiled": rebuilt,
    }
    write_json(os.path.join(entry, toolchain.RECORD_NAME), record)
    xla_note = "XLA: built" if xla else f"XLA: not built, {xla_reason}"
    say(f"tfring: built {library} for TensorFlow {tf_version} with {record['mpi_version']} "
        f"({nccl_note}; {xla_note}) in {time.time() - start:.1f} s, {rebuilt} of {len(objects)} files "
        "compiled")
    return record


def check_gpu_calls_are_tfrings(library):
    """Every NCCL and CUDA runtime call of the library must be one of tfring's own (the lists
    in backends/nccl/nccl_calls.h, backends/cuda/cuda_runtime_calls.h): a shared library
    links with the name undefined, and it would bind to whatever exports it first, such as
    TensorFlow's trampolines (docs/gpu.md, 'Which NCCL and CUDA runtime run')."""
    try:
        out = subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True,
                             text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return  # no nm here: tests/unit/test_gpu_bindings.py checks the same
    names = sorted(w for w in out.split() if w[:4] in ("nccl", "cuda") and w[4:5].isupper())
    if names:
        remove_if_exists(library)
        raise BuildError(f"{os.path.basename(library)} calls {', '.join(names)} without "
                         "defining them: add each to backends/nccl/nccl_calls.h or "
                         "backends/cuda/cuda_runtime_calls.h")


def bench_sources(gpu):
    """bench/native/*.cc; those for NCCL only in GPU builds."""
    files = sources(NATIVE_BENCH_DIR)
    return files if gpu else [f for f in files if not any(m in f for m in GPU_TEST_MARKERS)]


def build_native_benches(mpicxx, by_source, runtime_objs, bench_files, gpu_link):
    """bench/native/*.cc: each a binary over the runtime and the in-process ranks, in
    build/bench/."""
    core = [o for o in runtime_objs if "/runtime/" not in o]
    support = [by_source[s] for s in sources(INPROC_DIR) + BENCH_SUPPORT]
    for source in bench_files:
        out = os.path.join(CHECKOUT_BUILD_DIR, "bench", os.path.basename(source)[:-3])
        link(mpicxx, core + support + [by_source[source]], out, ["-pthread"] + gpu_link)


def link_host_gpu(compiler, objects, say):
    """The host GPU's library, and libcuda.so.1 beside it (batched_copy.cc opens the driver by
    that name, which LD_LIBRARY_PATH finds); none where a source failed to compile."""
    driver = os.path.join(os.path.dirname(HOST_GPU_LIBRARY), "libcuda.so.1")
    errors = [o for o in objects if isinstance(o, BuildError)]
    if errors:
        remove_if_exists(HOST_GPU_LIBRARY)  # the suite must not run a stale one
        say(f"tfring: the host GPU did not compile, so the suite runs no NCCL test without a "
            f"GPU: {str(errors[0]).splitlines()[0]}")
        return
    # -Bsymbolic: its own calls stay inside it, as in libnccl and libcudart, whatever a test
    # loaded RTLD_GLOBAL before it (tests/unit/test_gpu_bindings.py loads trampolines).
    link(compiler, objects, HOST_GPU_LIBRARY, ["-shared", "-pthread", "-Wl,-Bsymbolic"])
    if not os.path.islink(driver):
        os.symlink(os.path.basename(HOST_GPU_LIBRARY), driver)


def is_test_binary(path):
    """tests/cpp/test_*.cc and scenario_*.cc each make a binary; the other sources there (and
    the harness, test_harness.cc, which holds main()) are support code linked into each.
    scenario_*.cc: binaries that a failure test launches under conditions of its own (a rank
    killed, say), never run by the suite on their own."""
    f = os.path.basename(path)
    return f.startswith(("test_", "scenario_")) and f != "test_harness.cc"


def build_native_tests(mpicxx, by_source, runtime_objs, test_files, link_flags, tests_dir):
    """tests/cpp/test_*.cc and scenario_*.cc: each a binary over the runtime (no TensorFlow).

    Every other .cc there (and the harness, test_harness.cc, which holds main()) is support
    code linked into each binary, with the in-process backend.
    """
    # Everything but the global runtime and its C API: tests compose their own coordinators,
    # except the tests of the global runtime itself (test_*global_runtime*).
    core = [o for o in runtime_objs if "/runtime/" not in o]
    support = [by_source[s] for s in sources(INPROC_DIR)]
    support += [by_source[f] for f in test_files if not is_test_binary(f)]
    for f in filter(is_test_binary, test_files):
        out = os.path.join(tests_dir, os.path.basename(f)[:-3])
        runtime = runtime_objs if "global_runtime" in os.path.basename(f) else core
        link(mpicxx, runtime + support + [by_source[f]], out, ["-pthread"] + link_flags)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also build tests/cpp binaries")
    parser.add_argument("--native-only", action="store_true",
                        help="build only the runtime's native tests, without TensorFlow")
    parser.add_argument("--sanitize", choices=sorted(SANITIZERS),
                        help="with --native-only: the native tests under a sanitizer, in "
                             "build/tests-<sanitizer>/")
    parser.add_argument("--where", action="store_true",
                        help="print this environment's build folder and build nothing")
    args = parser.parse_args(argv)
    try:
        if args.where:
            print(toolchain.entry_dir())
        elif args.native_only:
            build(native_only=True, sanitize=args.sanitize)
        else:
            entry = toolchain.entry_dir()
            with EntryLock(entry):
                build(entry, with_tests=args.tests)
    except BuildError as e:
        print(f"tfring build failed: {e}", file=sys.stderr)
        return 1
    return 0

