"""More tensor names than the response cache holds, end to end: a fresh mpirun job
(tests/jobs/_cache_job.py) with TFRING_CACHE_CAPACITY=8. Full, the cache gives the least
recently used tensor's place to a new one (tfring/kernels/core/response_cache.h); the
native tests (test_cache_eviction_inproc) check which is evicted and when a tensor runs
from the cache."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


# At 3 ranks the ready bits of a slot are AND-ed over more than a pair; 2 ranks are the
# same protocol's smaller case (`make test-full` runs it: full_only, tests/failure/conftest.py).
@pytest.mark.parametrize("np_", [pytest.param(2, marks=pytest.mark.full_only), 3])
def test_more_names_than_the_cache_holds(np_):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="3", TFRING_CACHE_CAPACITY="8",
               TFRING_STALL_SHUTDOWN_TIME_SECONDS="60")
    proc = subprocess.run([MPIRUN, "--oversubscribe", "-np", str(np_), sys.executable,
                           os.path.join(HERE, "_cache_job.py")],
                          capture_output=True, text=True, timeout=180, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for rank in range(np_):
        assert f"rank {rank}: all results right" in out, out
    # Rank 0 says once that the cache is full and what to do about it.
    assert out.count("tfring's response cache is full (TFRING_CACHE_CAPACITY=8 tensors)") == 1, out
    assert "raise TFRING_CACHE_CAPACITY" in out, out
