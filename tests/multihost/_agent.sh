#!/bin/sh
# mpirun's launch agent for the multi-host test, in place of ssh (PRRTE's plm_ssh_agent) and
# called like it: _agent.sh HOST COMMAND..., COMMAND being a shell command line that starts
# PRRTE's daemon (PRRTE passes a custom agent only plm_ssh_args). MULTIHOST_HOSTS maps each HOST, an
# address, to its network namespace: "ADDRESS=NETNS ...". COMMAND runs inside that namespace,
# and in a UTS namespace of its own whose hostname is NETNS: both hosts would otherwise have
# this machine's hostname, by which PRRTE tells nodes and their session directories apart.
# ssh's options before the host are skipped: the Kubernetes MPI operators set
# `-o ConnectionAttempts=10` (OMPI_MCA_plm_rsh_args), which mpirun then passes to the agent.
while [ "${1#-}" != "$1" ]; do
  case $1 in -o|-p|-i|-l) shift 2 ;; *) shift ;; esac
done
host=$1
shift
for entry in $MULTIHOST_HOSTS; do
  if [ "${entry%%=*}" = "$host" ]; then
    exec ip netns exec "${entry#*=}" unshare --uts sh -c \
      'echo "$1" > /proc/sys/kernel/hostname && exec sh -c "$2"' sh "${entry#*=}" "$*"
  fi
done
echo "$0: no namespace for host '$host' in MULTIHOST_HOSTS='$MULTIHOST_HOSTS'" >&2
exit 255
