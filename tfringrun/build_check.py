"""tfringrun --check-build: what was built where, and what tfring's GPU calls go to."""

import json
import os
import shutil
import subprocess
import sys

from tfringrun.tfring_modules import REBUILD_COMMAND, toolchain

# Run in a Python of its own: tfring's library loaded beside TensorFlow, as a script has it,
# and asked which NCCL and CUDA runtime it opened (tfring/_process/gpu_libraries.py).
PROBE = ("import json, tensorflow, tfring\n"
         "from tfring._process import gpu_libraries\n"
         "print('TFRING-GPU-LIBRARIES ' + json.dumps(gpu_libraries.report()))\n")


def check_build(out=sys.stdout, probe=True):
    """Prints what was built where for this environment; returns 0, or 1 when there is no
    library that `import tfring` would load as it is (it would build one first). `probe`:
    where the GPU path is built, also which NCCL and CUDA runtime its calls go to, as loaded
    beside TensorFlow in a Python of its own (a few seconds: it imports TensorFlow)."""
    tc = toolchain()
    try:
        entry = tc.entry_dir()
    except tc.BuildError as e:
        print(f"tfring: cannot build here: {e}", file=out)
        return 1
    dist, installed = tc.tensorflow_distribution()
    record = tc.read_record(entry)
    # The record's TF version is tf.__version__ ("2.21.0-rc0"); pip's is "2.21.0rc0": compare
    # pip's with the pip version the build recorded beside it.
    stale = tc.stale_reason(entry, None)
    if not stale and record and record.get("tensorflow_distribution") not in (None, installed):
        stale = (f"it was built for TensorFlow {record.get('tensorflow_distribution')}, and "
                 f"TensorFlow {installed} is installed")
    lines = ["tfring build:",
             f"  Build folder    {entry}",
             f"  TensorFlow      {installed} ({dist})" if installed else
             "  TensorFlow      not installed: pip install 'tfring[cpu]' or 'tfring[gpu]'"]
    if record is None:
        lines.append(f"  Library         not built yet: the first `import tfring` builds it "
                     f"(or run {REBUILD_COMMAND})")
    else:
        if record.get("nccl"):
            nccl_line = (f"built, NCCL {record.get('nccl_version')} "
                         f"({record.get('nccl_library')})")
        else:
            nccl_line = f"not built ({record.get('nccl_not_built_because') or 'no NCCL found'})"
        if record.get("xla"):
            xla_line = ("built: allreduce, grouped_allreduce, broadcast, reducescatter run "
                        "inside jit_compile=True functions on the host")
        else:
            xla_line = (f"not built ({record.get('xla_not_built_because') or 'an older build'}): "
                        "XLA stays off for steps with tfring's ops")
        library = os.path.join(entry, tc.LIBRARY_NAME)
        state = f"; stale: {stale}, `import tfring` rebuilds it" if stale else ""
        lines += [
            f"  Library         {library} (built {record.get('built_at', '?')} for "
            f"TensorFlow {record['tensorflow']}{state})",
            f"  MPI             {record['mpi_version']} ({record['mpicxx']})",
            f"  NCCL (GPU ops)  {nccl_line}",
            f"  XLA lowerings   {xla_line}",
            "  Collectives     allreduce, grouped_allreduce, allgather, broadcast, alltoall, "
            "reducescatter: host tensors over MPI" +
            ("; GPU tensors over NCCL" if record.get("nccl") else ""),
        ]
        if record.get("nccl") and not stale and probe:
            lines += gpu_library_lines(probe_gpu_libraries())
    lines.append(f"  GPUs visible    {_visible_gpus()}")
    print("\n".join(lines), file=out)
    return 0 if record is not None and not stale else 1


def _visible_gpus():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "none (no nvidia-smi)"
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    names = [line.split(":", 1)[1].split("(")[0].strip()
             for line in listing.splitlines() if line.startswith("GPU ")]
    return f"{len(names)}: {', '.join(names)}" if names else "none"


def probe_gpu_libraries():
    """gpu_libraries.report() from a Python of its own, or {"probe_error": why}."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                              timeout=300, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        return {"probe_error": str(e)}
    for line in proc.stdout.splitlines():
        if line.startswith("TFRING-GPU-LIBRARIES "):
            return json.loads(line.split(" ", 1)[1])
    return {"probe_error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}


def gpu_library_lines(found):
    """The lines that say which NCCL and CUDA runtime tfring's GPU calls go to."""
    if "probe_error" in found:
        return [f"  GPU calls go to unknown: tfring could not be loaded to ask "
                f"({found['probe_error']})"]
    version_text = toolchain().version_text
    nccl, cuda = found["nccl"], found["cuda_runtime"]
    calls = ", ".join(f"{name} {'yes' if found.get(name) else 'no'}"
                      for name in ("revoke", "shrink", "grow"))
    lines = ["  GPU calls go to (as loaded beside TensorFlow):"]
    for entry, label, kind in ((nccl, "NCCL", "nccl"), (cuda, "CUDA runtime", "cuda")):
        if entry["error"]:
            lines.append(f"    {label:<13}{entry['error']}")
            continue
        chosen = "" if entry["file"] == entry["chosen"] else f", in place of {entry['chosen']}"
        lines.append(f"    {label:<13}{entry['file']} ({version_text(entry['version'], kind)}"
                     f"{chosen})" + (f"; NCCL's reshaping calls: {calls}" if kind == "nccl"
                                     else ""))
    devices = found.get("devices", -1)
    lines.append(f"    {'GPUs':<13}{devices}" if devices >= 0 else
                 f"    {'GPUs':<13}none usable ({found.get('devices_error', 'unknown')})")
    return lines

