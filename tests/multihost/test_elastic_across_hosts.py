"""Elastic training across the two namespace hosts (2 workers each), started with tfringrun
as a user would (-H, --min-np): a worker on the second host is killed mid-training, and the
3 left, on both hosts, roll back, re-form and finish with identical weights equal to numpy's
run of the same schedule (tests/failure/elastic_scenarios.py, elastic_across_hosts).

Across hosts Open MPI may pick coll/han for the job's communicators, which is not fault
tolerant (a revoke segfaults there, Open MPI issue #13915): tfringrun's elastic command
leaves it out. (Here the job also finished with han left in: the segfault did not show on
these hosts.) Skipped, saying why, where the namespaces cannot be made."""

import os
import sys

import pytest

import _hosts
import _run
from test_multihost import FORWARDED, JOB_ENV

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "..", "failure", "elastic_scenarios.py")
TFRINGRUN = os.path.join(os.path.dirname(sys.executable), "tfringrun")
TIMEOUT = 300


def run_elastic(hosts):
    env = dict(os.environ, **JOB_ENV, MULTIHOST_HOSTS=" ".join(f"{a}={ns}" for a, ns in hosts))
    command = [TFRINGRUN, "-np", "4", "--min-np", "2",
               "-H", ",".join(f"{address}:2" for address, _ in hosts),
               # The launch agent in place of ssh; the hosts share this machine's cores.
               "--mpi-args", f"--prtemca plm_ssh_agent {os.path.join(HERE, '_agent.sh')} "
                             f"--bind-to none " +
                             " ".join(f"-x {v}" for v in FORWARDED if v in env),
               sys.executable, SCENARIOS, "elastic_across_hosts"]
    return _run.run(command, env, TIMEOUT)


def test_a_worker_lost_on_one_host_leaves_the_others_finishing_alike():
    try:
        with _hosts.two_hosts() as hosts:
            rc, out = run_elastic(hosts)
    except _hosts.Unavailable as e:
        pytest.skip(f"cannot make two hosts from network namespaces: {e}")
    _run.assert_three_survivors_finished_alike(rc, out)
