"""The variables every rank needs from the launching shell, on other hosts too: tfring's
settings, and what makes `python` there the same Python with the same packages. tfringrun
exports them to the first workers (mpirun -x); an elastic job hands them to the workers it
starts later (tfring/_elastic/members.py), which mpirun's -x does not reach: tfringrun lists
their names in an environment variable for that (tfring/_elastic/environment.py), so
that the library needs nothing of the launcher."""

EXPORT_PREFIXES = ("TFRING_", "NCCL_", "TF_", "OMPI_MCA_", "PYTHON")
EXPORT_NAMES = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "KERAS_BACKEND", "GLIBC_TUNABLES")


def exported_names(env):
    """The names in `env` to export, sorted."""
    return sorted(k for k in env if k.startswith(EXPORT_PREFIXES) or k in EXPORT_NAMES)
