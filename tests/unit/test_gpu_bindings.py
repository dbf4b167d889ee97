"""tfring's NCCL and CUDA runtime calls reach the files tfring chose, whatever was loaded
before it (backends/nccl/nccl_library.h; docs/gpu.md, 'Which NCCL and CUDA runtime run').

TensorFlow's GPU build exports trampolines under NCCL's and CUDA's names from a library it
loads RTLD_GLOBAL; tests/cpp/gpu_standins/trampolines.cc stands in for it here (each of its
functions aborts, naming itself), loaded the same way before tensorflow and tfring. The host
GPU (tests/cpp/host_gpu) is the library chosen through TFRING_NCCL_LIBRARY and
TFRING_CUDA_RUNTIME_LIBRARY, so that the calls really run."""

import json
import os
import subprocess
import sys

import pytest

from tfring._process import library

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDINS = os.path.join(ROOT, "build", "tests", "gpu_standins")
TRAMPOLINES = os.path.join(STANDINS, "libtfring_test_trampolines.so")
FOREIGN_NCCL = os.path.join(STANDINS, "libnccl.so.2")
HOST_GPU = os.path.join(ROOT, "build", "tests", "host_gpu", "libtfring_host_gpu.so")

pytestmark = pytest.mark.skipif(
    not library.build_info()["nccl"] or not os.path.exists(TRAMPOLINES),
    reason="a build without the GPU path (or without its test libraries) has no GPU calls")

# Loads `first` RTLD_GLOBAL, then TensorFlow and tfring as a script does; prints the report
# (init() first when asked: it loads the libraries itself and logs them at debug level).
SCRIPT = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import tensorflow, tfring
from tfring._process import gpu_libraries
if sys.argv[2] == "init":
    tfring.init()
print("REPORT " + json.dumps(gpu_libraries.report()), flush=True)
"""


def loaded_after(first, env=None, init=False):
    settings = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, first, "init" if init else "-"],
                          capture_output=True, text=True, timeout=120, env=settings)
    assert "TRAMPOLINE CALLED" not in proc.stderr and "FOREIGN NCCL CALLED" not in proc.stderr, \
        proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT "))
    return json.loads(line.split(" ", 1)[1]), proc.stderr


def test_the_library_imports_no_nccl_or_cuda_name():
    """Nothing for the dynamic linker to bind elsewhere: every NCCL and CUDA name tfring
    calls is its own (hidden), and it links neither library."""
    path = library.library_path()
    undefined = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True,
                               text=True, check=True).stdout.split()
    assert not [s for s in undefined if s.startswith(("nccl", "cuda"))]
    exported = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                              text=True, check=True).stdout.split()
    assert not [s for s in exported if s.startswith(("nccl", "cuda"))]
    needed = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                            check=True).stdout
    assert "libnccl" not in needed and "libcudart" not in needed


def test_calls_reach_the_built_files_past_trampolines():
    found, _ = loaded_after(TRAMPOLINES)
    record = library.build_info()
    for key, built in (("nccl", record["nccl_library"]),
                       ("cuda_runtime", record["cuda_runtime_library"])):
        entry = found[key]
        assert entry["error"] == "" and entry["stray"] == "", entry
        assert os.path.realpath(entry["file"]) == os.path.realpath(built) == \
            os.path.realpath(entry["chosen"]), entry
    major, minor, patch = (int(x) for x in record["nccl_version"].split("."))
    assert found["nccl"]["version"] == major * 10000 + minor * 100 + patch
    assert found["cuda_runtime"]["version"] > 0
    # tfring's calls by name answer from the same files.
    assert found["versions_by_call"] == [found["nccl"]["version"],
                                         found["cuda_runtime"]["version"]], found


def test_calls_run_on_the_chosen_library_and_find_the_reshaping_calls():
    """The host GPU, chosen by setting, answers: one device; NCCL's revoke, shrink and grow
    are found in it (TensorFlow's NCCL table has no revoke or grow); init() logs both files."""
    chosen = {"TFRING_NCCL_LIBRARY": HOST_GPU, "TFRING_CUDA_RUNTIME_LIBRARY": HOST_GPU,
              "TFRING_LOG_LEVEL": "debug"}
    found, log = loaded_after(TRAMPOLINES, chosen, init=True)
    assert found["nccl"]["file"] == found["cuda_runtime"]["file"] == HOST_GPU, found
    assert found["nccl"]["error"] == found["cuda_runtime"]["error"] == "", found
    assert found["devices"] == 1 and "devices_error" not in found, found
    assert found["revoke"] and found["shrink"] and found["grow"], found
    assert f"NCCL: {HOST_GPU} (version " in log and "revoke yes, shrink yes, grow yes" in log
    assert f"CUDA runtime: {HOST_GPU} (version " in log


def test_an_nccl_of_another_version_loaded_first_is_refused_naming_both():
    found, _ = loaded_after(FOREIGN_NCCL, {"TFRING_TEST_FOREIGN_NCCL_VERSION": "21903"})
    error = found["nccl"]["error"]
    assert "two NCCLs in one process" in error and FOREIGN_NCCL in error, error
    assert "(NCCL 2.19.3)" in error and library.build_info()["nccl_library"] in error, error
    assert found["nccl"]["file"] == "" and not found["revoke"], found


def test_an_nccl_of_the_same_version_loaded_first_is_used():
    found, _ = loaded_after(FOREIGN_NCCL)
    assert found["nccl"]["file"] == FOREIGN_NCCL and found["nccl"]["error"] == "", found


def _report(nccl_error="", devices_error=None):
    entry = {"chosen": "/c/libnccl.so.2", "file": "/c/libnccl.so.2", "version": 23007,
             "error": nccl_error, "stray": ""}
    runtime = {"chosen": "/c/libcudart.so.13", "file": "/c/libcudart.so.13", "version": 13000,
               "error": "", "stray": ""}
    found = {"built": True, "nccl": entry, "cuda_runtime": runtime, "devices": 0}
    if devices_error:
        found.update(devices=-1, devices_error=devices_error)
    return found


@pytest.mark.parametrize("case", ["runtime refused by the driver", "another NCCL"])
def test_init_raises_naming_the_library_only_where_tensorflow_sees_gpus(case, monkeypatch):
    from tfring._process import gpu_libraries

    if case == "another NCCL":
        found = _report(nccl_error="two NCCLs in one process: /tf/libnccl.so.2 (NCCL 2.19.3)")
        expected = "two NCCLs in one process: /tf/libnccl.so.2"
    else:
        found = _report(devices_error="cudaErrorInsufficientDriver: CUDA driver version is "
                                      "insufficient for CUDA runtime version")
        expected = ("tfring's CUDA runtime /c/libcudart.so.13 (CUDA 13.0) cannot use this "
                    "host's GPUs: cudaErrorInsufficientDriver")
    monkeypatch.setattr(gpu_libraries, "report", lambda: found)
    asked = []
    assert gpu_libraries.check(lambda: asked.append(1) or 0) == found  # no GPU: GPU path unused
    assert asked == [1]
    with pytest.raises(RuntimeError, match="TensorFlow sees 2 GPU") as e:
        gpu_libraries.check(lambda: 2)
    assert expected in str(e.value)
    # Nothing wrong: TensorFlow is not even asked.
    monkeypatch.setattr(gpu_libraries, "report", lambda: _report())
    gpu_libraries.check(lambda: pytest.fail("TensorFlow asked for its GPUs"))
