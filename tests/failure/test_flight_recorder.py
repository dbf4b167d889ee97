"""The flight recorder at 3 ranks (tests/failure/flight_scenarios.py): every rank dumps when
a stall stops tfring, on SIGUSR1 (sent to tfringrun) and when asked, and `python -m
tfring.flight_recorder` says who stopped where, from the files; a rank blocked in Python
past a stall is ended by the launcher."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

from _scenario_run import (HERE, SCENARIO_TIMEOUT, TFRINGRUN, flight_report, run_scenario,
                           since_job_start)

STALL = {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "3"}


def _run(name, folder, env=None, ends_the_job=False):
    rc, out, _ = run_scenario(name, ranks=3, script="flight_scenarios.py",
                              env=dict(env or {}, TFRING_FLIGHT_RECORDER_DIR=str(folder)))
    assert (rc != 0) if ends_the_job else (rc == 0), out
    return out


def _line_of(code):
    with open(os.path.join(HERE, "flight_scenarios.py")) as f:
        return next(i for i, line in enumerate(f, 1) if code in line)


def test_a_rank_blocked_in_python_is_named_with_its_line_and_the_job_ends(tmp_path):
    # Rank 1 sleeps for a minute; the stall shutdown (3 s) fails the others' op, they exit,
    # and their MPI_Finalize waits TFRING_PEER_TIMEOUT_SECONDS (5 s here) for rank 1, then
    # gives up: the launcher ends rank 1.
    out = _run("blocked_in_python", tmp_path,
               dict(STALL, FLIGHT_TEST_SLEEP="60", TFRING_PEER_TIMEOUT_SECONDS="5"),
               ends_the_job=True)
    assert since_job_start(out, time.time()) < 45, out
    # The error says where the dumps are, on the ranks that got it.
    for rank in (0, 2):
        line = next(l for l in out.splitlines() if l.startswith(f"rank {rank}: step5: caught"))
        assert f"(flight recorder dumped to {tmp_path}: python -m tfring.flight_recorder " \
               f"{tmp_path})" in line, out
    assert "rank 1: step5" not in out, out  # it never woke
    assert re.search(r"\[tfring\] rank [02]: tfring stopped on a failure \(the error above\), "
                     r"and MPI_Finalize waited 5 s \(TFRING_PEER_TIMEOUT_SECONDS\) for ranks "
                     r"that did not exit", out), out
    text, report = flight_report(tmp_path)
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
    text, report = flight_report(tmp_path)
    assert report["first_parting"]["name"] == "step5", report
    assert report["first_parting"]["not_submitted_by"] == [1], report
    assert report["instead"] == [{"rank": 1, "name": "step6",
                                  "description": "allreduce 'step6' (float32 [2])"}], report
    assert "Rank 1 submitted allreduce 'step6' (float32 [2]) instead" in text, text


def test_sigusr1_to_tfringrun_and_the_call_dump_a_live_job_which_goes_on(tmp_path):
    # `kill -USR1` of tfringrun: it passes the signal to mpirun, which passes it to every rank.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TFRING_FLIGHT_RECORDER_DIR=str(tmp_path))
    with subprocess.Popen([TFRINGRUN, "-np", "3", sys.executable,
                           os.path.join(HERE, "flight_scenarios.py"), "signal_then_other_shape"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as job:
        lines = []
        watchdog = threading.Timer(SCENARIO_TIMEOUT, job.kill)  # a hang fails, not blocks
        watchdog.start()
        try:
            for line in job.stdout:
                lines.append(line)
                if sum("waiting for SIGUSR1" in l for l in lines) == 3:
                    job.send_signal(signal.SIGUSR1)
                    break
            lines += job.stdout.readlines()
            rc = job.wait(timeout=SCENARIO_TIMEOUT)
        finally:
            watchdog.cancel()
            job.kill()
    out = "".join(lines)
    assert rc == 0, out
    for rank in range(3):
        assert f"rank {rank}: signal dump: SIGUSR1 (a dump asked for from outside: kill " \
               f"-USR1); done: step0 step1 step2 step3 step4; stacks: True" in out, out
        assert f"rank {rank}: dumped {tmp_path}/rank-{rank}.json" in out, out
        assert f"rank {rank}: finished" in out, out
    text, report = flight_report(tmp_path)
    assert report["reasons"]["0"] == "tfring.dump_flight_recorder() was called", report
    assert report["mismatches"] == [{"name": "step5", "field": "shape",
                                     "by_rank": {"0": [2], "1": [3], "2": [2]}}], report
    assert "Mismatch: 'step5' has a different shape (rank 0: [2], rank 1: [3], rank 2: [2])" \
        in text, text
