"""`make compat`: install tfring beside each TensorFlow 2.16-2.22, let it build, smoke-test it.

    python tools/compat.py                     # every release in RELEASES, then the full package
    python tools/compat.py --releases 2.16 2.21 --work /tmp/compat
    python tools/compat.py --keras floor       # each release with the oldest Keras it allows
    python tools/compat.py --keras nightly     # each release with keras-nightly

For each TensorFlow release it creates a virtual environment, installs that release's
tensorflow-cpu (the newest patch, with the Keras 3 that pip resolves for it), then tfring from
an sdist built from this checkout, exactly as a user would (`--keras floor`: with the oldest
Keras 3 that release's requirements allow, `keras>=X` pinned to X, instead of the newest): `pip install tfring-*.tar.gz`
beside their TensorFlow. It checks that the install left TensorFlow as it was (same
distribution, same version, no second TensorFlow), times the first `import tfring` (which
builds the library), and runs tools/compat_smoke.py on 2 ranks.

Two last rows do the same with the full `tensorflow` package (the GPU build, here on a machine
without GPUs) and the `gpu` extra's CUDA 12 wheels (CUDA12_WHEELS) installed first, tfring
installed once from the sdist and once straight from the checkout (`pip install <checkout>`).
There the build must make the GPU path, and a process that imports TensorFlow and tfring and
calls init() under LD_DEBUG=bindings must bind none of tfring's NCCL or CUDA calls to
TensorFlow's libraries (its trampolines: docs/gpu.md, 'Which NCCL and CUDA runtime run');
the result column says which NCCL and CUDA runtime the calls go to.

It prints one Markdown table (release, TensorFlow and Keras installed, build seconds, result)
for docs/tensorflow-versions.md. Not part of `make test`: it downloads a
TensorFlow per row (set PIP_FIND_LINKS to a folder of wheels to reuse them) and takes about
two to four minutes per row on 2 cores.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "tools", "compat_smoke.py")
RELEASES = ["2.16", "2.17", "2.18", "2.19", "2.20", "2.21", "2.22"]
# Releases out only as candidates so far: pip takes their pre-releases (2.22.0rc0).
CANDIDATES = {"2.22"}
FULL_PACKAGE = "2.21"  # the release tried again with `tensorflow` instead of tensorflow-cpu
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
REPORT_PROBE = (
    "import importlib.metadata as m\n"
    "for d in ('tensorflow', 'tensorflow-cpu', 'keras', 'keras-nightly', 'tfring'):\n"
    "    try: print(d, m.version(d))\n"
    "    except m.PackageNotFoundError: print(d, '-')\n")


# What the gpu extra installs beside TensorFlow's GPU build (pyproject.toml), but TensorFlow
# itself: the files tfring's GPU path is built against.
CUDA12_WHEELS = ["nvidia-nccl-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12",
                 "nvidia-cuda-cccl-cu12"]
BINDINGS_PROBE = (
    "import json, tensorflow, tfring\n"
    "tfring.init()\n"
    "from tfring._process import gpu_libraries\n"
    "print('REPORT ' + json.dumps(gpu_libraries.report()))\n")


class RowFailed(Exception):
    pass


def run(cmd, timeout, cwd, env=None, what=""):
    proc = subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RowFailed(f"{what or cmd[0]} failed (exit {proc.returncode}):\n  " +
                        "\n  ".join(tail))
    return proc.stdout


def build_sdist(out):
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({out!r}))"
    name = run([sys.executable, "-c", code], 300, ROOT, what="building the sdist").split()[-1]
    return os.path.join(out, name)


def installed(python, cwd):
    lines = run([python, "-c", REPORT_PROBE], 60, cwd, what="reading versions").splitlines()
    return dict(line.split() for line in lines)


KERAS_FLOOR_PROBE = (
    "import importlib.metadata as m, re, sys\n"
    "for r in m.requires(sys.argv[1]) or []:\n"
    "    found = re.match(r'keras\\s*>=\\s*([0-9.]+)', r)\n"
    "    if found: print(found.group(1))\n")


def one_row(release, distribution, tfring_source, work, keras_mode="newest"):
    """(tensorflow, keras, build seconds, result) for one environment."""
    venv = os.path.join(work, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv], 300, work, what="creating the venv")
    python, pip = os.path.join(venv, "bin", "python"), [os.path.join(venv, "bin", "python"),
                                                        "-m", "pip", "install", "-q"]
    env = dict(ENV, PATH=os.path.join(venv, "bin") + os.pathsep + ENV.get("PATH", ""),
               TFRING_CACHE_DIR=os.path.join(work, "cache"))
    pre = ["--pre"] if release in CANDIDATES else []
    run(pip + pre + [f"{distribution}=={release}.*"], 1800, work, env,
        f"pip install {distribution}")
    if keras_mode == "nightly":  # Keras's next release as it stands (keras-nightly)
        run([python, "-m", "pip", "uninstall", "-q", "-y", "keras"], 300, work, env,
            "pip uninstall keras")
        run(pip + ["--pre", "keras-nightly"], 900, work, env, "pip install keras-nightly")
    # A candidate pins keras-nightly (2.22.0rc0: >=3.12.0.dev): its oldest is a nightly too.
    if keras_mode == "floor" and release not in CANDIDATES:
        floor = run([python, "-c", KERAS_FLOOR_PROBE, distribution], 60, work, env,
                    "reading TensorFlow's Keras requirement").split()
        if not floor:
            raise RowFailed(f"{distribution} {release} declares no keras>=X requirement")
        run(pip + [f"keras=={floor[0]}"], 900, work, env, f"pip install keras=={floor[0]}")
    if distribution == "tensorflow":
        run(pip + CUDA12_WHEELS, 1800, work, env, "pip install the CUDA 12 wheels")
    before = installed(python, work)
    run(pip + [tfring_source], 900, work, env, f"pip install {tfring_source}")
    after = installed(python, work)
    tf_version = after[distribution]
    for d in ("tensorflow", "tensorflow-cpu"):
        if before[d] != after[d]:
            raise RowFailed(f"installing tfring changed {d} from {before[d]} to {after[d]}")
    start = time.time()
    run([python, "-c", "import tfring"], 1200, work, env, "the first import (the build)")
    seconds = time.time() - start
    mpirun = os.path.join(venv, "bin", "mpirun")
    out = run([mpirun, "--oversubscribe", "-np", "2", python, SMOKE], 900, work, env,
              "the 2-rank smoke test")
    summary = [line for line in out.splitlines() if line.startswith("compat smoke: ok")]
    if not summary:
        raise RowFailed("the smoke test printed no result:\n" + out[-2000:])
    keras_version = after["keras"] if after["keras"] != "-" else \
        f"nightly {after['keras-nightly']}"
    result = "pass" + (gpu_bindings(python, work, env) if distribution == "tensorflow" else "")
    return tf_version, keras_version, seconds, result


def gpu_bindings(python, work, env):
    """Runs BINDINGS_PROBE under LD_DEBUG=bindings; fails the row where the GPU path was not
    built or any of libtfring's nccl*/cuda* names is bound to another library; else says
    which NCCL and CUDA runtime the calls go to."""
    trace = os.path.join(work, "ld-bindings")
    shutil.rmtree(trace, ignore_errors=True)
    os.makedirs(trace)
    out = run([python, "-c", BINDINGS_PROBE], 600, work,
              dict(env, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=os.path.join(trace, "ld")),
              "the bindings probe")
    report = json.loads(next(l for l in out.splitlines() if l.startswith("REPORT "))[7:])
    if not report.get("built"):
        raise RowFailed("the build made no GPU path beside TensorFlow's GPU build")
    traced, bound = 0, []
    for path in glob.glob(os.path.join(trace, "ld.*")):
        with open(path, errors="replace") as f:
            mine = [line.strip() for line in f
                    if "binding file" in line and "libtfring.so" in line.split(" to ")[0]]
        traced += len(mine)
        bound += [line for line in mine if re.search(r"symbol `(nccl|cuda|cu)[A-Z]", line)]
    if not traced:  # the check itself did not work: no binding of tfring's library seen
        raise RowFailed("LD_DEBUG=bindings traced no binding of libtfring.so")
    if bound:
        raise RowFailed(f"{len(bound)} of tfring's NCCL/CUDA names bound by the dynamic "
                        f"linker, e.g. {bound[0]}")
    nccl, cuda = report["nccl"], report["cuda_runtime"]
    if nccl["error"] or cuda["error"]:
        raise RowFailed(f"tfring could not load its GPU libraries: {nccl['error']} "
                        f"{cuda['error']}")
    calls = "/".join(c for c in ("revoke", "shrink", "grow") if report[c])
    return (f"; GPU path built, 0 NCCL/CUDA names bound to TensorFlow; calls go to "
            f"{os.path.basename(nccl['file'])} {version(nccl['version'], 'nccl')} ({calls} "
            f"found) and {os.path.basename(cuda['file'])} {version(cuda['version'], 'cuda')}")


def version(code, kind):
    if kind == "nccl":
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 10}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs="*", default=RELEASES,
                        help="tensorflow-cpu releases (none: only the full package's rows)")
    parser.add_argument("--keras", choices=["newest", "floor", "nightly"], default="newest",
                        help="the newest Keras pip resolves, the oldest the release allows, "
                             "or keras-nightly (Keras's next release)")
    parser.add_argument("--no-full-package", action="store_true",
                        help=f"skip the row with the full tensorflow {FULL_PACKAGE} package")
    parser.add_argument("--work", default=os.path.join(ROOT, "build", "compat"),
                        help="where the venvs and builds go (replaced row by row)")
    parser.add_argument("--keep", action="store_true", help="keep the last row's venv")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    for old in glob.glob(os.path.join(args.work, "tfring-*.tar.gz")):
        os.remove(old)
    sdist = build_sdist(args.work)
    rows = [(r, "tensorflow-cpu", "sdist") for r in args.releases]
    if not args.no_full_package:
        rows += [(FULL_PACKAGE, "tensorflow", "sdist"), (FULL_PACKAGE, "tensorflow", "checkout")]
    table = ["| release | installed first | tfring from | Keras | first import (build) | "
             "2-rank smoke test |", "| --- | --- | --- | --- | ---: | --- |"]
    failures = 0
    for release, distribution, source in rows:
        print(f"compat: {distribution} {release}, tfring from its {source} ...",
              file=sys.stderr, flush=True)
        try:
            tf_version, keras_version, seconds, result = one_row(
                release, distribution, sdist if source == "sdist" else ROOT, args.work,
                args.keras)
            table.append(f"| {release} | {distribution} {tf_version} | {source} | "
                         f"{keras_version} | {seconds:.0f} s | {result} |")
        except (RowFailed, subprocess.TimeoutExpired) as e:
            failures += 1
            first = str(e).splitlines()[0]
            print(f"compat: {distribution} {release} FAILED: {e}", file=sys.stderr, flush=True)
            table.append(f"| {release} | {distribution} | {source} | | | FAILED: {first} |")
        if not args.keep:
            shutil.rmtree(os.path.join(args.work, "venv"), ignore_errors=True)
        print(table[-1], file=sys.stderr, flush=True)
    print("\n".join(table))
    print(f"\nPython {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores; tfring installed with pip beside the TensorFlow named.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
