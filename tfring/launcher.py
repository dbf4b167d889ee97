"""tfringrun: start a tfring job with the MPI tfring was built with, or check the build.

    tfringrun --check-build            # what this build has: TF, MPI, NCCL, GPUs
    tfringrun -np 4 python train.py    # = <that MPI's mpirun> -np 4 python train.py

This version passes everything but --check-build straight to `mpirun` (the one beside the
`mpicxx` tfring was built with), as root and oversubscribed where needed, and exits with
its status. Host lists, timeline and tuning flags come with the full launcher (README, 'Not
yet').
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys

from tfring import _library


def _installed_tensorflow():
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_build(out=sys.stdout):
    """Prints what this build of tfring has; returns 0, or 1 when it cannot run here."""
    try:
        info = _library.build_info()
    except ImportError as e:
        print(f"tfring: not built: {e}", file=out)
        return 1
    installed = _installed_tensorflow()
    ok = installed == info["tensorflow"]
    tf_line = info["tensorflow"] + ("" if ok else f" (but TensorFlow {installed} is installed: "
                                                   f"rebuild with {_library.REBUILD_COMMAND})")
    if info.get("nccl"):
        nccl_line = f"built, NCCL {info.get('nccl_version')} ({info.get('nccl_library')})"
    else:
        nccl_line = f"not built ({info.get('nccl_not_built_because') or 'no NCCL found'})"
    gpus = _visible_gpus()
    lines = [
        "tfring build:",
        f"  TensorFlow      {tf_line}",
        f"  MPI             {info['mpi_version']} ({info['mpicxx']})",
        f"  NCCL (GPU ops)  {nccl_line}",
        f"  GPUs visible    {gpus}",
        "  Collectives     allreduce, grouped_allreduce, allgather, broadcast: host tensors "
        "over MPI" + ("; GPU tensors over NCCL" if info.get("nccl") else ""),
    ]
    print("\n".join(lines), file=out)
    return 0 if ok else 1


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


def mpirun_path():
    """The mpirun beside the mpicxx tfring was built with (the same MPI), else PATH's."""
    try:
        built_with = _library.build_info()["mpicxx"]
        beside = os.path.join(os.path.dirname(built_with), "mpirun")
        if os.path.exists(beside):
            return beside
    except ImportError:
        pass
    found = shutil.which("mpirun")
    if not found:
        raise SystemExit("tfringrun: no mpirun found; build tfring first (BUILD.md)")
    return found


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--check-build" in argv:
        return check_build()
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    env = dict(os.environ)
    command = [mpirun_path()]
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if "--oversubscribe" not in argv:
        command.append("--oversubscribe")  # more ranks than cores is a user's choice here
    return subprocess.call(command + argv, env=env)


if __name__ == "__main__":
    sys.exit(main())
