"""The Slurm tests share the multi-host test's hosts (network namespaces) and its job, and one
cluster (_cluster.py) for the whole run. Where the cluster cannot be made they skip, saying
which package or step is missing, unless TFRING_SUITE_REQUIRE_SLURM=1 (.ci/run installs the
packages and sets it): then they fail."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multihost"))

import _cluster  # noqa: E402
import _hosts  # noqa: E402


@pytest.fixture(scope="session")
def slurm():
    try:
        with _cluster.cluster() as cluster:
            yield cluster
            return
    except (_cluster.Unavailable, _hosts.Unavailable) as e:
        message = f"no Slurm cluster on this machine: {e}"
    if os.environ.get("TFRING_SUITE_REQUIRE_SLURM") == "1":
        pytest.fail(message + " (TFRING_SUITE_REQUIRE_SLURM=1)")
    pytest.skip(message)
