"""How the failure tests start a scenario: mpirun (or tfringrun) over a script of this
folder, its output gathered for the test to read."""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
TFRINGRUN = os.path.join(os.path.dirname(sys.executable), "tfringrun")


def run_scenario(name, env=None, timeout=90, mpirun_options=(), ranks=2, script="scenarios.py"):
    full_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    start = time.time()
    proc = subprocess.run([MPIRUN, *mpirun_options, "--oversubscribe", "-np", str(ranks),
                           sys.executable,
                           os.path.join(HERE, script), name],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start


def run_tfringrun(flags, scenario, ranks, env=None, timeout=180):
    """`tfringrun -np ranks FLAGS python elastic_scenarios.py SCENARIO`."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    start = time.time()
    proc = subprocess.run([TFRINGRUN, "-np", str(ranks), *flags, sys.executable,
                           os.path.join(HERE, "elastic_scenarios.py"), scenario],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start
