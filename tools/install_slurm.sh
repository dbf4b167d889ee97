#!/usr/bin/env bash
# Installs the Debian packages the Slurm stage of the suite needs (tests/slurm/_cluster.py:
# munge, slurmctld, slurmd, the client commands, and libpmix-dev, whose libpmix.so Slurm's
# PMIx plugin loads), where any is missing. As root, or through sudo without a password.
# .ci/run calls it; the stage itself configures and starts everything in a temporary folder.
set -euo pipefail
packages="munge slurmctld slurmd slurm-client libpmix-dev"
missing=0
for tool in munged slurmctld slurmd srun sbatch salloc sinfo; do
  command -v "$tool" >/dev/null || missing=1
done
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || missing=1
[ "$missing" = 0 ] && exit 0
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo -n"; fi
echo "install_slurm: apt-get install $packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $packages \
  >/dev/null
