"""How the failure tests start a scenario: mpirun (or tfringrun) over a script of this
folder, its output gathered for the test to read."""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
TFRINGRUN = os.path.join(os.path.dirname(sys.executable), "tfringrun")


# The subprocesses' timeouts only keep a hang from holding the stage: they count from the
# test's start, start-up and TensorFlow's import included, which a loaded 2-core machine
# running two tests at a time stretches (an elastic job took 176 s so). The tests' own time
# bounds count from the job's start or from an event (since_job_start, the kill's time).
SCENARIO_TIMEOUT = 240
ELASTIC_TIMEOUT = 300


def run_scenario(name, env=None, timeout=SCENARIO_TIMEOUT, mpirun_options=(), ranks=2,
                 script="scenarios.py"):
    full_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    start = time.time()
    proc = subprocess.run([MPIRUN, *mpirun_options, "--oversubscribe", "-np", str(ranks),
                           sys.executable,
                           os.path.join(HERE, script), name],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start


def run_tfringrun(flags, scenario, ranks, env=None, timeout=ELASTIC_TIMEOUT,
                  script="elastic_scenarios.py"):
    """`tfringrun -np ranks FLAGS python SCRIPT SCENARIO`."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    start = time.time()
    proc = subprocess.run([TFRINGRUN, "-np", str(ranks), *flags, sys.executable,
                           os.path.join(HERE, script), scenario],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start


def flight_report(folder):
    """(the text, the JSON) of `python -m tfring.flight_recorder folder [--json]`: the
    command's main(), both ways, in one process (each start imports TensorFlow)."""
    import json

    separator = "=" * 20
    code = ("import sys; from tfring import flight_recorder as f; "
            f"f.main([sys.argv[1]]); print({separator!r}); f.main([sys.argv[1], '--json'])")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    text, as_json = run.stdout.split(separator + "\n")
    return text, json.loads(as_json)


def since_job_start(out, ended, started=r"rank \d+: started (?:as rank \d+ of \d+ )?at ([0-9.]+)"):
    """Seconds from the job's own start (the earliest 'started ... at T' line its workers
    print once tfring is up: process start-up and TensorFlow's import, which take what the
    machine's load makes them, are not the job's to answer for) to `ended`."""
    import re

    stamps = [float(t) for t in re.findall(started, out)]
    assert stamps, out
    return ended - min(stamps)
