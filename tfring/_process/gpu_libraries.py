"""Which NCCL and CUDA runtime tfring's GPU calls go to, and the check init() makes of them.

tfring opens both itself, by file (the ones its build found, or TFRING_NCCL_LIBRARY and
TFRING_CUDA_RUNTIME_LIBRARY), and calls them through tables of its own, so that TensorFlow's
GPU build, which exports trampolines under the same names, cannot stand in between
(backends/nccl/nccl_library.h; docs/gpu.md, 'Which NCCL and CUDA runtime run').
"""

import ctypes
import json

from tfring._process import library as _library
from tfring.build import toolchain


def report():
    """What the library loaded (loading it now if not yet), as a dict:

    built: whether this build has the GPU path; where it has: nccl and cuda_runtime, each
    {chosen, file, version, error, stray}; revoke, shrink, grow: NCCL's reshaping calls
    found; versions_by_call: [NCCL's, the CUDA runtime's] as tfring's calls by name get them;
    devices: the GPUs tfring's CUDA runtime sees (-1 with devices_error when it
    cannot tell).
    """
    lib = _library.capi()
    out = ctypes.create_string_buffer(4096)
    needed = lib.tfring_gpu_libraries(out, len(out))
    if needed > len(out):
        out = ctypes.create_string_buffer(needed)
        lib.tfring_gpu_libraries(out, len(out))
    return json.loads(out.value.decode(errors="replace"))


def problems(found):
    """Why tfring's GPU path cannot run here (a list of sentences; empty when it can)."""
    if not found.get("built"):
        return []
    out = []
    for key, what in (("nccl", "NCCL"), ("cuda_runtime", "The CUDA runtime")):
        entry = found[key]
        if entry["error"]:
            out.append(entry["error"])
        elif entry["stray"]:
            out.append(f"{what} {entry['file']}: some calls resolved elsewhere: {entry['stray']}")
    if not out and found.get("devices_error"):
        runtime = found["cuda_runtime"]
        out.append(
            f"tfring's CUDA runtime {runtime['file']} ("
            f"{toolchain.version_text(runtime['version'], 'cuda')}) cannot use this host's GPUs: "
            f"{found['devices_error']}. tfring must be built against the CUDA major "
            "TensorFlow was built for: `pip install 'tfring[gpu]'` (the CUDA 12 wheels), then "
            "rebuild (BUILD.md, 'GPU (NCCL)')")
    return out


def check(tensorflow_gpus):
    """Raises RuntimeError naming the library when TensorFlow sees GPUs (`tensorflow_gpus`, a
    callable: asked only when there is a problem) that tfring's GPU path cannot serve. Where
    TensorFlow sees none, tfring's GPU path is never used and nothing is raised."""
    found = report()
    trouble = problems(found)
    if not trouble:
        return found
    gpus = tensorflow_gpus()
    if gpus:
        raise RuntimeError(
            f"tfring.init(): TensorFlow sees {gpus} GPU(s), but tfring's GPU path cannot run "
            "here: " + "; ".join(trouble))
    return found
