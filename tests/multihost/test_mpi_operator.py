"""A job launched the way the Kubeflow MPI Operator's launcher pod launches it (MPIJob
v2beta1; Trainer v2's MPI runtime sets the same): the hostfile of the worker pods given only
through Open MPI 4's variable OMPI_MCA_orte_default_hostfile, with the operator's other
ORTE-era settings, and the workers reached through a launch agent (here _agent.sh into the
namespace hosts, in place of the operator's ssh). Open MPI 5's mpirun ignores those names:
- with tfringrun, the job runs across both hosts (it passes them on under PRRTE's names,
  saying so in one line);
- with plain mpirun, every rank runs on the launcher, and tfring's rank 0 warns, naming the
  hostfile and the fix (no silent single-host job).
"""

import os
import re
import sys

import pytest

import _hosts
import _run
from test_multihost import JOB_ENV

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
SMALL_JOB = os.path.join(HERE, "_small_job.py")
LINE = re.compile(r"rank (\d+) of (\d+), local (\d+) of (\d+), cross (\d+) of (\d+), "
                  r"on (\S+): sum ok")
TIMEOUT = 180


@pytest.fixture(scope="module")
def operator_env(tmp_path_factory):
    """(environment of the operator's launcher, hostfile, [(address, netns)]) while the hosts
    exist."""
    hostfile = tmp_path_factory.mktemp("mpi-operator") / "hostfile"
    try:
        with _hosts.two_hosts() as hosts:
            # The operator's /etc/mpi/hostfile: one line per worker pod.
            hostfile.write_text("".join(f"{address} slots=2\n" for address, _ in hosts))
            env = dict(os.environ, **JOB_ENV,
                       OMPI_MCA_orte_default_hostfile=str(hostfile),
                       OMPI_MCA_orte_keep_fqdn_hostnames="true",
                       OMPI_MCA_orte_set_default_slots="2",
                       OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10",
                       OMPI_MCA_plm_rsh_agent=os.path.join(HERE, "_agent.sh"),
                       MULTIHOST_HOSTS=" ".join(f"{a}={ns}" for a, ns in hosts))
            yield env, hostfile, hosts
            return
    except _hosts.Unavailable as e:
        message = str(e)
    pytest.skip(f"cannot make two hosts from network namespaces: {message}")


def run(command, env):
    return _run.run(command, env, TIMEOUT)


def layout(out):
    """{rank: (size, local, local size, cross, cross size, host)} from _small_job's lines."""
    found = {int(m[1]): (*map(int, m.groups()[1:6]), m[7]) for m in LINE.finditer(out)}
    assert sorted(found) == [0, 1, 2, 3], out[-6000:]
    return found


def test_tfringrun_follows_the_operators_hostfile(operator_env):
    env, hostfile, hosts = operator_env
    rc, out = run([os.path.join(BIN, "tfringrun"), "-np", "4", sys.executable, SMALL_JOB], env)
    assert rc == 0, out[-6000:]
    assert out.count("tfringrun: Open MPI 5's mpirun ignores Open MPI 4's (ORTE) settings") == 1
    assert "OMPI_MCA_orte_default_hostfile -> PRTE_MCA_prte_default_hostfile" in out
    for rank, seen in layout(out).items():
        # Ranks 0,1 on the first worker, 2,3 on the second; hostnames are the namespaces'.
        assert seen == (4, rank % 2, 2, rank // 2, 2, hosts[rank // 2][1]), (rank, seen)
    assert str(hostfile) not in out  # no warning: the hostfile was followed


def test_plain_mpirun_runs_on_the_launcher_and_tfring_says_so(operator_env):
    env, hostfile, _ = operator_env
    rc, out = run([os.path.join(BIN, "mpirun"), "--oversubscribe", "-np", "4", sys.executable,
                   SMALL_JOB], env)
    assert rc == 0, out[-6000:]
    assert {seen[5] for seen in layout(out).values()} == {os.uname().nodename}  # the launcher
    warning = (f"{hostfile} (OMPI_MCA_orte_default_hostfile) lists 2 hosts")
    assert out.count(warning) == 1, out[-4000:]  # rank 0's
    assert f"mpirun --hostfile {hostfile}" in out
