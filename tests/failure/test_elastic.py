"""Elastic training (tfring.elastic, tfring.keras.elastic, tfringrun's elastic flags) under
MPI's fault tolerance: workers killed mid-training, workers joining from host discovery.
Each scenario is in elastic_scenarios.py (workers lost) or elastic_growth_scenarios.py (jobs
changed through host discovery, and Keras' fit); its workers print how they finished."""

import re
import time

import pytest

from _scenario_run import ELASTIC_TIMEOUT, run_scenario, run_tfringrun, since_job_start


def _assert_job_finished(rc, out):
    """mpirun's status (tfringrun's too) for a job whose workers left all finished: 0 (under
    MPI's fault tolerance a killed worker does not count). The one exception is Open MPI's
    known flaw: after a lost worker, MPI_Finalize can wait for ever (open-mpi/ompi#11404; with
    a worker that joined, often); a worker still waiting after TFRING_ELASTIC_FINALIZE_TIMEOUT
    ends without it, saying so with its own status, 0, and mpirun takes that exit for an
    improper one ('exiting improperly', or 'LAUNCHER JOB OBJECT NOT FOUND' where a worker
    joined): status 1 then, and only so."""
    if rc == 0:
        return
    flat = " ".join(out.split())
    assert rc == 1, out
    assert "This process ends now without it, with status 0" in flat, out
    assert "This process ends now without it, with status 1" not in flat, out


def _elastic_survivors(scenario, finished, env=None):
    """Runs an elastic scenario at 3 ranks under ULFM (rank 2 is killed mid-training), checks
    that the survivors' weights match numpy's replay and each other, and that the job ended
    well (mpirun under MPI's fault tolerance says 0 when the workers left finished, the
    killed one notwithstanding); returns the output."""
    rc, out, _ = run_scenario(scenario, ranks=3, timeout=ELASTIC_TIMEOUT,
                              script="elastic_scenarios.py", mpirun_options=("--with-ft", "ulfm"),
                              env=env)
    assert re.search(r"rank 2: killing myself", out), out
    _assert_two_survivors_agree(out, finished, "[2]")
    _assert_job_finished(rc, out)
    return out


def _assert_two_survivors_agree(out, finished, sizes):
    """Ranks 0 and 1 of 2 finished as `finished` says, their resets saw `sizes`, their
    weights match numpy's replay and each other's."""
    weights = []
    for rank in (0, 1):
        done = re.search(rf"rank {rank}: finished at {finished} as rank {rank} of 2, resets saw "
                         rf"sizes {re.escape(sizes)}, matches numpy: True, weights (.*)", out)
        assert done, out
        weights.append(done.group(1))
    assert weights[0] == weights[1], out


def test_elastic_run_finishes_on_the_ranks_left_with_the_same_weights():
    # Horovod's elastic pattern (tfring.elastic): a worker killed mid-training; the others
    # roll back to their last commit, re-form, and finish with weights that match numpy's
    # run of the same schedule (3 workers for batches 0-7, then 2) and each other.
    out = _elastic_survivors("elastic_custom_loop", finished="epoch - batch 20")
    # A process set made before the reset names ranks of the old numbering: refused, in an
    # eager call and in a tf.function traced before the reset alike.
    for rank in (0, 1):
        assert (f"rank {rank}: old process set refused: tfring.allreduce: process set [0, 1] "
                "was made before the job lost a worker") in out, out
        assert re.search(rf"rank {rank}: old process set refused in a traced function: .*"
                         r"'old_pair_traced': process set \[0, 1\] was made before the job lost "
                         r"a worker", out), out


def test_a_worker_lost_during_the_reset_rolls_back_and_re_forms_again():
    # Rank 2 dies at batch 8; while the job re-forms at 2, rank 1 dies in the first reset
    # callback, before the callback's allreduce rank 0 is in. Rank 0 rolls back to batch 8
    # again, re-forms alone, its callback's allreduce counts 1, and it finishes as numpy's
    # replay of 3 workers for batches 0-7 and 1 from batch 8 on.
    rc, out, _ = run_scenario("elastic_lost_in_reset", ranks=3, timeout=ELASTIC_TIMEOUT,
                              script="elastic_scenarios.py", mpirun_options=("--with-ft", "ulfm"))
    assert re.search(r"rank 1: killing myself in the reset callback", out), out
    assert "rank 0: the reset callback's allreduce counted 1 worker(s)" in out, out
    assert re.search(r"rank 0: finished at epoch - batch 20 as rank 0 of 1, resets saw sizes "
                     r"\[2, 1\], matches numpy: True", out), out
    _assert_job_finished(rc, out)


def test_a_hung_worker_ends_the_job_with_a_named_error():
    # Rank 2 stops answering (SIGSTOP) without dying: the others' peer timeout (3 s here)
    # fires, but MPI reports no failed process, so MPI's shrink could not go on without it
    # and mpirun would wait for it for ever. Each survivor raises PeerHung, saying so, and
    # the job is ended (MPI_Abort), the stopped process with it.
    rc, out, _ = run_scenario("elastic_peer_stopped", ranks=3, timeout=ELASTIC_TIMEOUT,
                              script="elastic_scenarios.py", mpirun_options=("--with-ft", "ulfm"),
                              env={"TFRING_PEER_TIMEOUT_SECONDS": "3"})
    ended = time.time()
    stopped = re.search(r"rank 2: stopping myself at ([0-9.]+)", out)
    assert stopped, out
    assert ended - float(stopped.group(1)) < 60, out
    assert rc != 0, out
    assert re.search(r"PeerHung: tfring.elastic: a worker stopped answering but MPI reports no "
                     r"failed process, so the job cannot be re-formed without it; the job stops "
                     r"\(rank [01] got no answer from its peer ranks for 3 s", out), out
    assert "ends the whole job (MPI_Abort)" in out, out
    assert "finished at" not in out, out


@pytest.mark.serial  # the first step after the reset within 10 s of the kill
def test_rank_0_lost_after_uncommitted_steps_rolls_back_and_renumbers():
    # Commits every 3 batches; rank 0 dies after batch 4, with batches 3 and 4 done but not
    # committed. The survivors roll back to batch 3 and do 3 and 4 again as 2 (numpy's
    # replay: 3 workers for batches 0-2, 2 from batch 3 on). Right after the reset, the
    # hook (State.reset) and then the callbacks see the new numbering; the weights the
    # callback spoils on the new rank 1 come back from the new rank 0 at the sync.
    rc, out, _ = run_scenario("elastic_rank0_lost_uncommitted", ranks=3,
                              timeout=ELASTIC_TIMEOUT, script="elastic_scenarios.py",
                              mpirun_options=("--with-ft", "ulfm"))
    killed = re.search(r"rank 0: killing myself at ([0-9.]+)", out)
    assert killed, out
    # Kill to the first step done after the reset (detection, re-forming, the hook, the
    # callback, the state's sync, one step): seconds, not the peer timeout (docs/elastic.md
    # has measured figures).
    resumed = [float(t) for t in re.findall(r"rank [12]: first step after the reset done at "
                                            r"([0-9.]+)", out)]
    assert len(resumed) == 2 and all(t - float(killed.group(1)) < 10 for t in resumed), out
    weights = []
    for old, new in ((1, 0), (2, 1)):
        mine = [line for line in out.splitlines() if line.startswith(f"rank {old}: ")]
        hook = mine.index(f"rank {old}: reset hook: now rank {new} of 2, local rank {new} of 2")
        assert mine[hook + 1] == f"rank {old}: callback after the hook at batch 3", out
        done = re.search(rf"rank {old}: finished at epoch - batch 12 as rank {new} of 2, resets "
                         r"saw sizes \[2\], matches numpy: True, weights (.*)", out)
        assert done, out
        weights.append(done.group(1))
    assert weights[0] == weights[1], out
    _assert_job_finished(rc, out)


def test_tf1_session_elastic_run_finishes_on_the_ranks_left_with_the_same_weights():
    # TensorFlowState over a TF1 graph's variables and session, with the TF1
    # DistributedOptimizer, committing every 3 batches: the survivors roll back to batch 6
    # (the variables through the session), and numpy replays 3 workers for batches 0-5, 2 on.
    _elastic_survivors("tf1_session", finished="epoch - batch 20")


def test_a_worker_whose_code_raises_is_lost_and_the_others_finish():
    # Horovod's exit_mode='exception': an error in one worker's own code ends that worker
    # only; the others roll back, re-form without it and finish as after a kill. tfringrun
    # says 0: the job finished.
    rc, out, _ = run_tfringrun(["--min-np", "2"], "elastic_worker_raises", ranks=3)
    assert re.search(r"rank 2: raising at", out), out
    assert "ValueError: worker 2 fails at batch 8" in out, out
    assert "tfring.elastic: rank 2 ends on the exception above, as a lost worker" in out, out
    _assert_two_survivors_agree(out, "epoch - batch 20", "[2]")
    _assert_job_finished(rc, out)


def test_without_fault_tolerance_a_worker_that_raises_stops_the_others_saying_where():
    # Plain mpirun (no --with-ft ulfm): a killed worker would make mpirun end the others
    # without a word, so the raising worker shuts down as usual and each other gets
    # tfring's error naming it.
    rc, out, _ = run_scenario("elastic_worker_raises", ranks=3, timeout=ELASTIC_TIMEOUT,
                              script="elastic_scenarios.py")
    assert rc != 0, out
    assert "ValueError: worker 2 fails at batch 8" in out, out
    # (A rank whose op was pending when the shutdown reached it dumped its flight recorder
    # and says where; one whose op came just after has nothing pending to dump.)
    for rank in (0, 1):
        assert re.search(rf"AbortedError: tfring was shut down on rank 2 while this op was "
                         rf"pending (\(flight recorder dumped to [^)]+\) )?\(tensor '[^']+', "
                         rf"rank {rank}\)", out), out
    assert "as a lost worker" not in out, out


def test_every_worker_raising_fails_the_job():
    # The same error on every worker: none is left to go on, and tfringrun says 1 (mpirun
    # under MPI's fault tolerance would say 0 for workers that ended so).
    rc, out, _ = run_tfringrun(["--min-np", "2"], "elastic_every_worker_raises", ranks=3)
    for rank in range(3):
        assert f"ValueError: worker {rank} fails at batch 3" in out, out
    assert "tfringrun: every worker of the job ended on an error (3 ended so" in out, out
    assert rc == 1, out


def _two_kills(flags):
    """4 workers; the one started as rank 3 dies at batch 4, then rank 2 at batch 8. Returns
    mpirun's status and the output, after checking that the first reset re-formed the job
    at 3 on every survivor."""
    rc, out, _ = run_tfringrun(flags, "elastic_two_kills", ranks=4)
    assert re.search(r"rank 3: killing myself", out), out
    for rank in (0, 1, 2):
        assert f"rank {rank}: reset at batch 4: now rank {rank} of 3" in out, out
    for rank in (0, 1):
        assert f"rank {rank}: a process set made after the reset summed 2" in out, out
    assert re.search(r"rank 2: killing myself", out), out
    return rc, out


def test_tfringrun_min_np_stops_every_survivor_with_the_counts():
    # tfringrun --min-np turns on MPI's fault tolerance and passes the floor on: 4 workers
    # with --min-np 3 go on at 3 after the first loss, and the second stops both survivors,
    # each saying how many are left and how many are needed.
    rc, out = _two_kills(["--min-np", "3"])
    assert rc != 0, out
    assert out.count("2 worker(s) are left and --min-np needs 3; the job cannot go on") >= 2, out
    assert "finished at" not in out, out


def test_tfringrun_reset_limit_allows_that_many_resets_then_stops():
    # Repeated kills up to --reset-limit 1: the first reset goes through, the second loss
    # stops the 2 left, saying why. (The elastic tests above finish after a reset.)
    rc, out = _two_kills(["--reset-limit", "1"])
    assert rc != 0, out
    message = "after 1 reset(s), and --reset-limit 1 allows no more; the job stops here"
    assert out.count(message) >= 2, out
    assert "finished at" not in out, out




def _discovered(tmp_path, hosts, flags, scenario, ranks, env=None,
                script="elastic_growth_scenarios.py"):
    """Runs `scenario` under tfringrun with a discovery script that prints a file the
    scenario rewrites (its path in TFRING_TEST_HOSTS); the file starts as `hosts`. The
    finalize deadline is 3 s, not 10: with a worker that joined, Open MPI's MPI_Finalize
    often waits for ever (_assert_job_finished); one that returns within 3 s is not delayed,
    and a worker whose finalize is cut off ends with its own status all the same."""
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text(hosts)
    env = dict({"TFRING_ELASTIC_FINALIZE_TIMEOUT": "3"}, **(env or {}))
    return run_tfringrun(["--host-discovery-script", f"cat {hosts_file}", *flags], scenario,
                         ranks, env=dict(env, TFRING_TEST_HOSTS=str(hosts_file)),
                         script=script)


def _assert_all_agree(out, workers, finished, sizes_of_old):
    """Ranks 0..workers-1 of `workers` finished as `finished` says, matching numpy's replay
    and each other; the ones that were there before the change saw `sizes_of_old` at their
    resets (a worker that joined saw none)."""
    weights = []
    for rank in range(workers):
        done = re.search(rf"rank {rank}: finished at {finished} as rank {rank} of {workers}, "
                         rf"resets saw sizes (\[[0-9, ]*\]), matches numpy: True, weights (.*)",
                         out)
        assert done, out
        assert done.group(1) in (sizes_of_old, "[]"), out
        weights.append(done.group(2))
        # The schedule the state carries, rolled back with it, is the one the scenario planned.
        assert f"rank {rank}: the state's schedule is the plan's: True" in out, out
    assert len(set(weights)) == 1, out


def test_host_discovery_grows_the_job_from_2_to_3_then_takes_a_slot_back(tmp_path):
    # The discovery script's output grows from 2 to 3 slots mid-job: at the commit after
    # (the scenario waits for tfringrun's discovery to report it), the third worker is
    # started and joins; the reset callbacks scale the learning rate to 3. Then the output
    # drops back to 2: the worker on the slot taken back leaves (its process ends, saying
    # so), and the 2 left go on with numpy's weights for the batches planned at each size.
    rc, out, _ = _discovered(tmp_path, "localhost:2\n", ["--max-np", "3"],
                             "elastic_grows_then_shrinks", 2)
    # Open MPI counts the exit of a worker that joined and left as improper (status 1 at
    # the end; docs/elastic.md says so): the training itself is checked below.
    assert rc in (0, 1), out
    assert "rank 0: wrote hosts ['localhost:3']" in out, out
    for rank in (0, 1):  # at the commits after batches 3 and 6 (elastic_growth_scenarios.py's plan)
        assert re.search(rf"rank {rank}: reset at batch 4: now of 3", out), out
        assert re.search(rf"rank {rank}: reset at batch 7: now of 2", out), out
    assert "rank 2: started as rank 2 of 3" in out, out
    for rank in range(3):  # all on this machine: the local numbers count the new one too
        assert f"rank {rank}: local rank {rank} of 3" in out, out
    assert ("tfring.elastic: the host discovery no longer offers the slot of rank 2 on "
            "localhost; it leaves the job") in out, out
    _assert_all_agree(out, 2, "epoch - batch 40", "[3, 2]")
    assert "rank 2: finished" not in out, out


def test_a_worker_that_joined_counts_the_jobs_resets(tmp_path):
    # --reset-limit counts the job's resets, as Horovod's driver does: the worker that joined
    # at the first reset takes that count from rank 0, so when the discovery then takes its
    # slot back, it stops at the same reset as the two that were there from the start.
    rc, out, _ = _discovered(tmp_path, "localhost:2\n", ["--max-np", "3", "--reset-limit", "1"],
                             "elastic_grows_then_shrinks", 2)
    assert rc != 0, out
    assert "rank 2: started as rank 2 of 3" in out, out
    message = "after 1 reset(s), and --reset-limit 1 allows no more; the job stops here"
    assert out.count(message) == 3, out
    assert "finished at" not in out and "leaves the job" not in out, out


def _keras_fit_lost_then_grown(tmp_path, legacy, as_is):
    """tfring.keras.elastic as Horovod's Keras example uses it (KerasState, the commit, batch
    and epoch callbacks, a reset callback scaling the learning rate, model.fit in @run):
    rank 2 dies mid-epoch; the 2 left roll back and go on; then the discovery's new host
    gets a worker, which joins with the state (its optimizer's too) and fit goes on as 3.
    --min-np 2: without it the floor is -np (3), and the 2 left would wait for the new
    worker before going on. `as_is`: with what Horovod's example adds (a step of fit before
    the state is made, and one in the reset callback, which on the join pairs with the new
    worker's first step from its own initial weights; its callbacks in its own order);
    numpy's replay has those steps too."""
    env = {"TF_USE_LEGACY_KERAS": legacy, "TFRING_TEST_EXAMPLE_AS_IS": "1" if as_is else "0"}
    rc, out, _ = _discovered(tmp_path, "localhost:3\n", ["--min-np", "2"], "keras_fit", 3,
                             env=env)
    assert re.search(r"rank 2: killing myself", out), out
    assert out.count(f"rank 2: runs {'tf_keras' if legacy == '1' else 'Keras 3'}") == 2, out
    _assert_all_agree(out, 3, "epoch 4 batch 0", "[2, 3]")
    _assert_job_finished(rc, out)
    # The batches kept ran at the rate the reset callback set for the job's size.
    for rank in range(3):
        assert (f"rank {rank}: learning rate per job size, in base rates: [(2, 2.0), (3, 3.0)]"
                in out), out


def test_horovods_keras_example_as_is_loses_a_worker_then_grows_with_the_same_weights(
        tmp_path):
    _keras_fit_lost_then_grown(tmp_path, legacy="0", as_is=True)


# The same scenario without the example's extra steps, on Keras 3 and on tf_keras (whose
# elastic state and callbacks the tf_keras stage tests without a lost worker).
@pytest.mark.full_only
@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf_keras"])
def test_keras_fit_loses_a_worker_then_grows_with_the_same_weights(tmp_path, legacy):
    _keras_fit_lost_then_grown(tmp_path, legacy, as_is=False)


def test_a_worker_that_fails_to_start_stops_the_job_after_the_start_timeout(tmp_path):
    # The worker spawned to grow the job dies before it joins (here: at once; a crash while
    # importing TensorFlow, say). MPI's spawn would wait for ever: after
    # TFRING_ELASTIC_START_TIMEOUT every worker stops, saying why. Nothing hangs.
    rc, out, _ = _discovered(tmp_path, "localhost:2\n", [], "elastic_grows_then_shrinks", 2,
                             env={"TFRING_TEST_SPAWNED_FAIL": "1",
                                  "TFRING_ELASTIC_START_TIMEOUT": "3"})
    assert rc != 0, out
    assert "a spawned worker fails before it joins" in out, out
    message = ("tfring.elastic: the new worker(s) on localhost did not join within 3 s "
               "(TFRING_ELASTIC_START_TIMEOUT)")
    assert out.count(message) == 2, out
    assert "finished at" not in out and since_job_start(out, time.time()) < 90, out


def test_a_lost_worker_is_replaced_on_a_host_discovery_offers(tmp_path):
    # --min-np 3 and a worker lost: its host is blacklisted, and the 2 left wait for the
    # discovery to offer a slot elsewhere (127.0.0.1: this machine by another name), start a
    # worker there and go on as 3 from their last commit, with numpy's weights.
    rc, out, _ = _discovered(tmp_path, "localhost:3\n", ["--min-np", "3", "--elastic-timeout",
                                                         "60"], "elastic_replaced", 3)
    assert re.search(r"rank 2: killing myself", out), out
    _assert_all_agree(out, 3, "epoch - batch 40", "[3]")


@pytest.mark.serial  # the survivors stop 3 to 13 s after the kill
def test_below_min_np_for_elastic_timeout_stops_every_worker(tmp_path):
    # A worker lost with --min-np 3 and nothing offered: after --elastic-timeout (3 s) both
    # survivors stop, saying how many are left and needed, well within a few seconds more.
    rc, out, _ = _discovered(tmp_path, "localhost:3\n", ["--min-np", "3", "--elastic-timeout",
                                                         "3"], "elastic_custom_loop", 3,
                             script="elastic_scenarios.py")
    assert rc != 0, out
    killed = re.search(r"rank 2: killing myself at ([0-9.]+)", out)
    assert killed, out
    message = ("2 worker(s) are left and --min-np needs 3; the job cannot go on (no host "
               "offered more within --elastic-timeout 3 s)")
    assert out.count(message) >= 2, out
    stopped = [float(t) for t in re.findall(r"rank [01]: stopped at ([0-9.]+)", out)]
    assert len(stopped) == 2, out
    assert all(3 <= t - float(killed.group(1)) < 13 for t in stopped), out
    assert "finished at" not in out, out


def test_a_finalize_past_its_deadline_ends_the_worker_saying_why(tmp_path):
    # After a lost worker, Open MPI's MPI_Finalize can wait for ever on it, now and then: an
    # elastic worker's finalize runs under a deadline. At 0 s the survivors of the job above
    # end at once without it, saying why, with Python's status for the uncaught error (1). (The wait past a deadline is kept by a thread of the library's: mpi4py's
    # Finalize holds the GIL while it waits.)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    rc, out, _ = _discovered(tmp_path, "localhost:3\n", ["--min-np", "3", "--elastic-timeout",
                                                         "1"], "elastic_custom_loop", 3,
                             script="elastic_scenarios.py",
                             env={"TFRING_ELASTIC_FINALIZE_TIMEOUT": "0",
                                  # the two survivors' errors are printed before either ends
                                  "TFRING_TEST_EXIT_BARRIER": f"{barrier},2"})
    assert rc != 0, out
    assert out.count("2 worker(s) are left and --min-np needs 3") >= 2, out
    message = ("tfring.elastic: MPI_Finalize did not return within 0 s "
               "(TFRING_ELASTIC_FINALIZE_TIMEOUT); after a lost worker, Open MPI's fault "
               "tolerance can wait there for ever (open-mpi/ompi#11404). This process ends "
               "now without it, with status 1")
    # The first survivor to end so makes mpirun end the other, which may be cut off before it
    # says so: at least one says it, and both said why they stopped (above).
    assert out.count(message) >= 1, out
