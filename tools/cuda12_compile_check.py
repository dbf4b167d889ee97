"""Compiles tfring's GPU runtime against the CUDA 12 wheels users of TensorFlow's GPU build
install (syntax only), as `make test` does in a stage of its own.

    python tools/cuda12_compile_check.py        # both sets below; prints "N passed, M failed"

The suite's own build compiles the GPU path against CUDA 13's wheels (the gpu-build extra,
beside tensorflow-cpu). TensorFlow 2.16-2.22's GPU wheel runs with CUDA 12, and the gpu extra
installs CUDA 12's wheels, whose headers differ (CUDA 12's cuda_runtime_api.h maps some calls
to versioned names; an NCCL as old as 2.27 lacks the reshaping calls). Each set is fetched
once (pip download, only the headers kept) into build/cuda12/, and every source of the GPU
runtime (backends/cuda, backends/nccl, and runtime/ with the GPU path on) is compiled with
-fsyntax-only against it. The TensorFlow glue is left out: it reaches CUDA only through
those folders' headers, and its compiles take TensorFlow's headers (seconds each).
"""

import concurrent.futures
import glob
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tfring", "build"))
import toolchain  # noqa: E402  (standard library only: no TensorFlow import)

CACHE = os.path.join(ROOT, "build", "cuda12")
# The oldest that TensorFlow 2.21's `and-cuda` extra admits (nvidia-nccl-cu12>=2.27.7,
# nvidia-cuda-runtime-cu12>=12.5.82), and the newest on PyPI on 2026-12-07: what a user of
# `pip install 'tfring[gpu]'` gets today.
SETS = {
    "oldest": ["nvidia-nccl-cu12==2.27.7", "nvidia-cuda-runtime-cu12==12.5.82",
               "nvidia-cuda-nvcc-cu12==12.5.82", "nvidia-cuda-cccl-cu12==12.5.39.post1"],
    "newest": ["nvidia-nccl-cu12==2.32.3", "nvidia-cuda-runtime-cu12==12.9.79",
               "nvidia-cuda-nvcc-cu12==12.9.86", "nvidia-cuda-cccl-cu12==12.9.27"],
}
GPU_SOURCES = ["backends/cuda", "backends/nccl", "runtime"]


def headers(name, pins):
    """The folder whose nvidia/<package>/include/ hold the set's headers (fetched once)."""
    folder = os.path.join(CACHE, name)
    done = os.path.join(folder, ".pins")
    if os.path.exists(done) and open(done).read() == " ".join(pins):
        return folder
    wheels = os.path.join(CACHE, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "-d", wheels] + pins, check=True, timeout=900)
    for pin in pins:
        dist, version = pin.split("==")
        [wheel] = glob.glob(os.path.join(wheels, f"{dist.replace('-', '_')}-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if "/include/" in member:
                    z.extract(member, folder)
    with open(done, "w") as f:
        f.write(" ".join(pins))
    return folder


def flags(folder):
    """The build's own GPU flags (toolchain.GpuToolchain) for the headers in `folder`."""
    nvidia = os.path.join(folder, "nvidia")
    runtime = os.path.join(nvidia, "cuda_runtime", "include")
    extra = [os.path.join(nvidia, p, "include") for p in ("cuda_nvcc", "cuda_cccl")]
    gpu = toolchain.GpuToolchain(os.path.join(nvidia, "nccl", "include"), "libnccl.so.2",
                                 [runtime] + extra, "libcudart.so.12")
    return ["-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-Wno-sign-compare",
            f"-I{ROOT}"] + gpu.compile_flags()


def main():
    mpicxx = toolchain.find_mpicxx()
    sources = sorted(s for d in GPU_SOURCES
                     for s in glob.glob(os.path.join(toolchain.KERNELS, d, "*.cc")))
    jobs = []
    for name, pins in SETS.items():
        folder = headers(name, pins)
        nccl = open(os.path.join(folder, "nvidia", "nccl", "include", "nccl.h")).read()
        print(f"{name}: {' '.join(pins)} (nccl.h {'with' if 'ncclCommRevoke' in nccl else 'without'}"
              " ncclCommRevoke)", flush=True)
        jobs += [(name, s, [mpicxx] + flags(folder) + [s]) for s in sources]

    def one(job):
        name, source, cmd = job
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return name, source, proc

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for name, source, proc in pool.map(one, jobs):
            if proc.returncode != 0:
                failed += 1
                print(f"FAILED {name}: {os.path.relpath(source, ROOT)}\n{proc.stderr[-3000:]}")
    print(f"{len(jobs) - failed} passed, {failed} failed (GPU runtime sources against CUDA 12's "
          f"wheels, syntax only)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
