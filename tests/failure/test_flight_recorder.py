"""The flight recorder at 3 ranks (tests/failure/flight_scenarios.py): every rank dumps when
a stall stops tfring, on SIGUSR1 and when asked, and `python -m tfring.flight_recorder`
says who stopped where, from the files."""

import json
import os
import subprocess
import sys

from _scenario_run import HERE, run_scenario

STALL = {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "3"}


def _run(name, folder, env=None):
    rc, out, _ = run_scenario(name, ranks=3, script="flight_scenarios.py",
                              env=dict(env or {}, TFRING_FLIGHT_RECORDER_DIR=str(folder)))
    assert rc == 0, out
    return out


def _report(folder):
    """(the analyzer's text, its JSON), each from its own run of the command."""
    command = [sys.executable, "-m", "tfring.flight_recorder", str(folder)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    text = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert text.returncode == 0, text.stderr
    as_json = subprocess.run(command + ["--json"], capture_output=True, text=True,
                             timeout=120, env=env)
    assert as_json.returncode == 0, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def _line_of(code):
    with open(os.path.join(HERE, "flight_scenarios.py")) as f:
        return next(i for i, line in enumerate(f, 1) if code in line)


def test_a_rank_blocked_in_python_is_named_with_its_line(tmp_path):
    out = _run("blocked_in_python", tmp_path, dict(STALL, FLIGHT_TEST_SLEEP="10"))
    # The error says where the dumps are, on every rank.
    for rank in range(3):
        line = next(l for l in out.splitlines() if l.startswith(f"rank {rank}: step5: caught"))
        assert f"(flight recorder dumped to {tmp_path}: python -m tfring.flight_recorder " \
               f"{tmp_path})" in line, out
    text, report = _report(tmp_path)
    assert report["dumped"] == [0, 1, 2] and report["not_dumped"] == [], report
    parting = report["first_parting"]
    assert parting["name"] == "step5" and parting["submitted_by"] == [0, 2], report
    assert parting["not_submitted_by"] == [1] and parting["waiting_seconds"] >= 3, report
    where = report["ranks"]["1"]["python"]
    sleep_line = _line_of("time.sleep(seconds)")
    assert (where["function"], where["line"]) == ("wait_in_python", sleep_line), report
    assert report["ranks"]["1"]["unfinished"] == [], report
    # The others wait in step5, inside their call of tfring's allreduce.
    assert report["ranks"]["0"]["python"]["calling"] == "allreduce", report
    assert "allreduce 'step5' (float32 [2]): submitted by ranks 0, 2" in text, text
    assert "never by rank 1" in text, text
    assert f"Rank 1 (stopped: in no collective): its main thread was in wait_in_python at " \
           f"{os.path.join(HERE, 'flight_scenarios.py')}:{sleep_line}." in text, text


def test_a_skipped_collective_and_what_came_in_its_place(tmp_path):
    _run("skips_one", tmp_path, STALL)
    text, report = _report(tmp_path)
    assert report["first_parting"]["name"] == "step5", report
    assert report["first_parting"]["not_submitted_by"] == [1], report
    assert report["instead"] == [{"rank": 1, "name": "step6",
                                  "description": "allreduce 'step6' (float32 [2])"}], report
    assert "Rank 1 submitted allreduce 'step6' (float32 [2]) instead" in text, text


def test_sigusr1_and_the_call_dump_a_live_job_which_goes_on(tmp_path):
    out = _run("signal_then_other_shape", tmp_path)
    for rank in range(3):
        assert f"rank {rank}: signal dump: SIGUSR1 (a dump asked for from outside: kill " \
               f"-USR1); done: step0 step1 step2 step3 step4; stacks: True" in out, out
        assert f"rank {rank}: dumped {tmp_path}/rank-{rank}.json" in out, out
        assert f"rank {rank}: finished" in out, out
    text, report = _report(tmp_path)
    assert report["reasons"]["0"] == "tfring.dump_flight_recorder() was called", report
    assert report["mismatches"] == [{"name": "step5", "field": "shape",
                                     "by_rank": {"0": [2], "1": [3], "2": [2]}}], report
    assert "Mismatch: 'step5' has a different shape (rank 0: [2], rank 1: [3], rank 2: [2])" \
        in text, text
