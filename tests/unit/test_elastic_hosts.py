"""Host discovery for elastic jobs, without a job: what tfringrun makes of the script's
output (tfringrun/discovery.py), what the workers plan from it (tfring/_elastic/members.py),
the deadline of their MPI_Finalize at exit (tfring/_elastic/process_end.py), and the order of
tfring.elastic.run's steps after a reset. The jobs that grow and shrink are in
tests/failure/test_elastic.py."""

import io
import json
import os

import pytest

from tfring._elastic import members
from tfringrun import discovery, launcher


def test_discovery_output_is_read_as_horovods():
    text = "# comment\nhost-a:4\n\nhost-b\nhost-a:2   # more on a\n"
    assert discovery.parse_hosts(text, default_slots=3) == [("host-a", 6), ("host-b", 3)]
    with pytest.raises(discovery.DiscoveryError, match=r"line 1 'h:x'"):
        discovery.parse_hosts("h:x\n")


def test_first_workers_fill_hosts_in_order_up_to_np_and_max_np():
    hosts = [("a", 2), ("b", 2), ("c", 1)]
    assert discovery.assign_start(hosts) == [("a", 2), ("b", 2), ("c", 1)]
    assert discovery.assign_start(hosts, np=3) == [("a", 2), ("b", 1)]
    assert discovery.assign_start(hosts, np=9, max_np=4) == [("a", 2), ("b", 2)]
    assert discovery.assign_start(hosts, np=1) == [("a", 1)]


def test_each_first_worker_knows_its_host_from_its_rank():
    env = {members.START_HOSTS: "a:2,b:1"}
    assert [members.start_label(r, env) for r in range(3)] == ["a", "a", "b"]


def test_the_plan_fills_free_slots_skips_blacklisted_hosts_and_stops_at_max_np():
    plan = members.plan_additions
    assert plan(["a", "a"], [("a", 3)]) == ["a"]
    assert plan(["a", "a"], [("a", 2)]) == []
    assert plan(["a"], [("a", 1), ("b", 2), ("c", 2)], max_np=4) == ["b", "b", "c"]
    assert plan(["a", "a"], [("a", 4), ("b", 1)], blacklist={"a"}) == ["b"]
    # More workers than a host now offers: none is added there (and none is stopped).
    assert plan(["a", "a", "b"], [("a", 1), ("b", 2)]) == ["b"]
    assert plan(["a"], [("a", 3)], max_np=1) == []


def test_workers_beyond_a_hosts_slots_leave_unless_too_few_would_be_left():
    assert members.plan_removals(["a", "a", "b", "a"], [("a", 2), ("b", 1)]) == [3]
    assert members.plan_removals(["a", "b", "b"], [("a", 1)]) == [1, 2]  # b is gone
    plan = members.plan_update(["a", "a", "b"], [("a", 1), ("c", 1)])
    assert plan == {"add": ["c"], "leave": [1, 2]}
    # Stopping would leave fewer than min_np (or none): nothing stops.
    assert members.plan_update(["a", "a"], [("a", 1)], min_np=2) == {"add": [], "leave": []}
    assert members.plan_update(["a"], []) == {"add": [], "leave": []}


def test_the_hosts_file_is_written_whole_and_read_back(tmp_path):
    path = str(tmp_path / "hosts.json")
    assert members.read_hosts_file(path) is None  # not written yet
    discovery.write_hosts(path, [("a", 2), ("b", 1)])
    assert members.read_hosts_file(path) == [("a", 2), ("b", 1)]
    assert sorted(os.listdir(tmp_path)) == ["hosts.json"]
    with open(path, "w") as f:
        f.write("{not json")
    assert members.read_hosts_file(path) is None


def test_a_failing_script_keeps_the_last_answer_and_says_so_once(tmp_path):
    answer = tmp_path / "answer"
    answer.write_text("a:2\n")
    err = io.StringIO()
    loop = discovery.DiscoveryLoop(f"cat {answer}", str(tmp_path / "hosts.json"), err=err)
    assert loop.poll_once() == [("a", 2)]
    answer.unlink()
    assert loop.poll_once() == [("a", 2)] and loop.poll_once() == [("a", 2)]
    assert err.getvalue().count("host discovery failed, keeping its last answer") == 1
    with open(loop.path) as f:
        assert json.load(f)["hosts"] == [["a", 2]]


def test_tfringrun_places_the_first_workers_where_discovery_says(tmp_path):
    answer = tmp_path / "answer"
    answer.write_text("a:2\nb:2\n")
    args = launcher.parse_args(["-np", "3", "--min-np", "2", "--max-np", "4",
                                "--host-discovery-script", f"cat {answer}", "python", "t.py"])
    loop = discovery.DiscoveryLoop(args.host_discovery_script, str(tmp_path / "hosts.json"))
    env = launcher.start_discovered(args, loop)
    assert (args.np, args.hosts) == (3, "a:2,b:1")
    assert env == {"TFRING_ELASTIC_HOSTS_FILE": loop.path, "TFRING_ELASTIC_START_HOSTS":
                   "a:2,b:1"}
    cmd, env = launcher.build_command(args, env, "mpirun", "openmpi", is_root=False)
    assert cmd[cmd.index("--with-ft") + 1] == "ulfm"
    assert cmd[cmd.index("--host") + 1] == "a:2,b:1" and cmd[cmd.index("-np") + 1] == "3"
    exported = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"}
    assert {"TFRING_ELASTIC_HOSTS_FILE", "TFRING_ELASTIC_START_HOSTS",
            "TFRING_ELASTIC_MAX_NP", "TFRING_ELASTIC_MIN_NP"} <= exported


def test_tfringrun_waits_for_min_np_slots_then_says_how_many_it_got(tmp_path, monkeypatch):
    monkeypatch.setattr(discovery, "INTERVAL_SECONDS", 0.05)
    answer = tmp_path / "answer"
    answer.write_text("a:1\n")
    args = launcher.parse_args(["--min-np", "2", "--elastic-timeout", "1",
                                "--host-discovery-script", f"cat {answer}", "python", "t.py"])
    loop = discovery.DiscoveryLoop(args.host_discovery_script, str(tmp_path / "hosts.json"))
    with pytest.raises(SystemExit, match=r"offered 1 slot\(s\) within --elastic-timeout 1 s, "
                                         r"and the job needs 2 to start"):
        launcher.start_discovered(args, loop)


def test_limits_name_the_timeout_when_discovery_offered_too_little():
    from tfring._elastic.job import Limits

    limits = Limits({"TFRING_ELASTIC_MIN_NP": "3"})
    with pytest.raises(RuntimeError, match=r"2 worker\(s\) are left and --min-np needs 3; the "
                                           r"job cannot go on \(no host offered more within "
                                           r"--elastic-timeout 7 s\)"):
        limits.check_enough_workers(2, waited=7)


def test_spawned_workers_get_the_settings_tfringrun_exported():
    from tfring._elastic.environment import EXPORTED_LIST
    from tfringrun import launcher

    env = {"TFRING_FUSION_THRESHOLD": "0", "PATH": "/v/bin", "HOME": "/root",
           "NCCL_HOSTID": "rank-0", "NCCL_NET": "Socket", "PYTHONPATH": "a\nb"}
    # What tfringrun's elastic command gives the first workers: the list among the rest.
    _, launched = launcher.build_command(
        launcher.parse_args(["-np", "2", "--min-np", "1", "python", "t.py"]), env, "mpirun",
        "openmpi", is_root=False)
    worker = dict(launched, OMPI_COMM_WORLD_RANK="0")  # mpirun's own: not passed on
    assert members.spawn_environment(worker) == [
        "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "NCCL_NET=Socket", "PATH=/v/bin",
        "PYTHONPATH=a\nb", f"{EXPORTED_LIST}={launched[EXPORTED_LIST]}",
        "TFRING_ELASTIC_MIN_NP=1", "TFRING_FUSION_THRESHOLD=0"]
    assert members.spawn_environment(env) == []  # not started by tfringrun: nothing listed


def test_the_finalize_deadline_is_read_from_its_setting():
    from tfring._elastic import process_end as _elastic_exit

    assert _elastic_exit.timeout_seconds({}) == 10.0
    assert _elastic_exit.timeout_seconds({_elastic_exit.TIMEOUT: " 2.5 "}) == 2.5
    assert _elastic_exit.timeout_seconds({_elastic_exit.TIMEOUT: "0"}) == 0.0
    for bad in ("-1", "soon"):
        with pytest.raises(ValueError, match=rf"TFRING_ELASTIC_FINALIZE_TIMEOUT='{bad}'"):
            _elastic_exit.timeout_seconds({_elastic_exit.TIMEOUT: bad})


def test_tfringrun_says_1_when_every_worker_ended_on_an_error(tmp_path, capsys):
    # Under MPI's fault tolerance mpirun says 0 for workers that killed themselves on an
    # error (to be lost to the others): tfringrun reads the workers' notes instead.
    def status(mpirun_status, *notes):
        folder = tmp_path / "+".join(notes or ("none",))
        folder.mkdir()
        for i, how in enumerate(notes):
            (folder / f"{how}.{100 + i}").touch()
        return launcher.elastic_status(mpirun_status, str(folder))

    assert status(0, "lost", "lost") == 1
    assert "every worker of the job ended on an error (2 ended so" in capsys.readouterr().err
    assert status(0, "lost", "finished") == 0  # the others went on and finished
    assert status(0, "finished", "finished") == 0
    assert status(0) == 0  # no notes (workers on other hosts): mpirun's word
    assert status(3, "finished") == 3


def test_a_raising_worker_leaves_as_lost_only_under_fault_tolerance():
    from tfring._elastic import process_end as _elastic_exit
    assert _elastic_exit._fault_tolerant({"OMPI_MCA_mpi_ft_enable": "1"})  # --with-ft ulfm
    assert _elastic_exit._fault_tolerant({"OMPI_MCA_mpi_ft_enable": "true"})
    assert not _elastic_exit._fault_tolerant({"OMPI_MCA_mpi_ft_enable": "0"})
    assert not _elastic_exit._fault_tolerant({})


def _recorded_state(events, bcast=lambda obj: obj):
    """A State whose hook, save, restore and sync only note in `events` that they ran;
    `bcast` stands for the broadcast from rank 0."""
    from tfring import elastic

    class Recorded(elastic.State):
        def reset(self):
            events.append("reset hook")

        def save(self):
            events.append("save")

        def restore(self):
            events.append("restore")

        def sync(self):
            events.append("sync")

    return Recorded(bcast_object=bcast, get_rank=lambda: 0)


def _elastic_run_without_a_job(monkeypatch, events, environ=None):
    """tfring.elastic with its reset (re-forming the job) and its finalize at exit replaced
    by notes in `events`; the limits read `environ`."""
    from tfring import elastic
    from tfring._elastic import job

    monkeypatch.setattr(job.process_end, "finalize_within_deadline_at_exit", lambda: None)
    monkeypatch.setattr(job, "_reset_after_loss", lambda limits: events.append("re-form"))
    for key in ("TFRING_ELASTIC_MIN_NP", "TFRING_ELASTIC_RESET_LIMIT", members.HOSTS_FILE):
        monkeypatch.delenv(key, raising=False)
    for key, value in (environ or {}).items():
        monkeypatch.setenv(key, value)
    return elastic


def test_a_lost_worker_rolls_back_then_reset_hook_then_callbacks_then_sync(monkeypatch):
    # Horovod's order: restore to the last commit, re-form, State.reset() (the hook
    # subclasses override), the reset callbacks, sync, the function again.
    events = []
    elastic = _elastic_run_without_a_job(monkeypatch, events)
    state = _recorded_state(events)
    state.register_reset_callbacks([lambda: events.append("callback")])

    @elastic.run
    def train(state):
        events.append("train")
        if events.count("train") == 1:
            raise elastic.HorovodInternalError("lost rank 2")
        return "done"

    assert train(state) == "done"
    assert events == ["sync", "train", "restore", "re-form", "reset hook", "callback", "sync",
                      "train"]
    assert elastic.State(bcast_object=None, get_rank=None).reset() is None  # a no-op there


def test_the_reset_limit_counts_the_jobs_resets_from_rank_0(monkeypatch):
    # A worker that joined after two resets has made none itself: at the sync it joins in,
    # it takes rank 0's count, so that it stops at the same reset as the others.
    events = []
    elastic = _elastic_run_without_a_job(monkeypatch, events,
                                         {"TFRING_ELASTIC_RESET_LIMIT": "2"})
    state = _recorded_state(events, bcast=lambda obj: 2 if isinstance(obj, int) else obj)

    @elastic.run
    def train(state):
        raise elastic.HorovodInternalError("lost rank 1")

    with pytest.raises(elastic.JobCannotGoOn, match=r"after 2 reset\(s\), and --reset-limit 2"):
        train(state)
    assert "re-form" not in events


def test_a_lost_worker_is_told_by_the_runtimes_record_not_by_words(monkeypatch):
    # Inside a tf.function TensorFlow turns the collective's UnavailableError into an
    # InternalError; the runtime's record of a lost peer, not the message, says it was one.
    import tensorflow as tf

    from tfring._elastic import job
    from tfring._process import runtime

    internal = tf.errors.InternalError(None, None, "op originally returned UnavailableError")
    monkeypatch.setattr(runtime, "peer_lost", lambda: False)
    assert not job._lost_a_worker(internal)  # the words alone: some other failure
    monkeypatch.setattr(runtime, "peer_lost", lambda: True)
    assert job._lost_a_worker(tf.errors.InternalError(None, None, "anything"))
    assert job._lost_a_worker(tf.errors.UnavailableError(None, None, "peer lost"))
    assert not job._lost_a_worker(tf.errors.InvalidArgumentError(None, None, "bad shape"))


def test_no_peer_is_lost_in_a_healthy_runtime():
    import tfring
    from tfring._process import runtime

    tfring.init()
    assert runtime.peer_lost() is False
    tfring.shutdown()
    assert runtime.peer_lost() is False
