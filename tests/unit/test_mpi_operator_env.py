"""tfringrun passes the Kubernetes MPI operators' Open MPI 4 (ORTE) settings on to Open MPI 5's
mpirun under their PRRTE names (tfringrun/operators.py)."""

import os
import subprocess
import sys

from tfringrun import operators

BIN = os.path.dirname(sys.executable)
OPERATOR_ENV = {  # what the MPI Operator's launcher pod gets (v2beta1)
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_set_default_slots": "4",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}


def test_open_mpi_major_version_from_mpirun_version():
    assert operators.openmpi_major("mpirun (Open MPI) 5.0.11\n\nReport bugs to ...") == 5
    assert operators.openmpi_major("mpirun (Open MPI) 4.1.6\n") == 4
    assert operators.openmpi_major("HYDRA build details:\n    Version: 4.2.0\n") is None


def test_each_orte_setting_gets_its_prrte_name_once():
    env, passed = operators.with_prrte_names(dict(OPERATOR_ENV, HOME="/root"), False)
    assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "true"
    assert env["PRTE_MCA_prte_set_default_slots"] == "4"
    assert env["PRTE_MCA_plm_ssh_args"] == "-o ConnectionAttempts=10"
    assert len(passed) == 4 and passed[0] == ("OMPI_MCA_orte_default_hostfile -> "
                                              "PRTE_MCA_prte_default_hostfile")
    assert "Kubernetes MPI operators" in operators.notice(passed)
    # A PRRTE setting already there wins; hosts given to tfringrun win over the hostfile.
    env, passed = operators.with_prrte_names(
        dict(OPERATOR_ENV, PRTE_MCA_plm_ssh_args="-p 2222"), hosts_given=True)
    assert env["PRTE_MCA_plm_ssh_args"] == "-p 2222"
    assert "PRTE_MCA_prte_default_hostfile" not in env
    assert len(passed) == 2
    assert operators.with_prrte_names({"HOME": "/root"}, False) == ({"HOME": "/root"}, [])


def test_the_operators_hostfile_reaches_mpirun_only_through_tfringrun(tmp_path):
    # The hostfile names a host that does not exist, reached through an agent that fails at
    # once: a job that reads it fails; one that ignores it runs here, on the launcher.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0.invalid slots=2\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "SLURM_"))}
    env.update(OMPI_MCA_orte_default_hostfile=str(hostfile), OMPI_MCA_plm_rsh_agent="false",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    program = [sys.executable, "-c", "print('ran on the launcher')"]
    plain = subprocess.run([os.path.join(BIN, "mpirun"), "-np", "1"] + program, env=env,
                           capture_output=True, text=True, timeout=60)
    assert "ran on the launcher" in plain.stdout, plain.stdout + plain.stderr  # the trap
    ours = subprocess.run([os.path.join(BIN, "tfringrun"), "-np", "1"] + program, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "passing them on under PRRTE's names: OMPI_MCA_orte_default_hostfile -> " \
           "PRTE_MCA_prte_default_hostfile" in ours.stderr, ours.stderr
    assert ours.returncode != 0 and "ran on the launcher" not in ours.stdout, \
        ours.stdout + ours.stderr
