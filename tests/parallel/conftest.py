"""Runs under `mpirun -np N python -m pytest tests/parallel`: every rank runs every test.

The suite runs the whole folder at 2 ranks, and at 3 ranks only the tests whose outcome
depends on the job's size (`--size-dependent`): those marked `size_dependent`, by the
decorator or in SIZE_DEPENDENT below, in a tf.function where they also run eagerly and in a
TF1 graph (the same kernel and runtime). A new test whose result changes with the number of
ranks (uneven splits, sets with several members, which rank errs or joins) goes there.
XLA parametrizations run at 2 ranks only: the lowering does not depend on the size.

Skips must be decided identically on every rank. A failing test aborts this rank at once
(os._exit), which makes mpirun end the whole job, so peers never block waiting for it.
"""

import os
import sys

import pytest
import tensorflow as tf

import tfring


# Node id prefixes (file, or file::test) of the tests that run at 3 ranks too.
SIZE_DEPENDENT = (
    "test_process_sets.py",                    # sets of several members, {0, 2} of 3
    "test_join.py", "test_drift.py", "test_errors.py",  # which ranks join, drift, are named
    "test_alltoall.py",                        # uneven splits, zero rows to a rank
    "test_hierarchical_allreduce.py",          # 2 ranks per host beside a host of 1
    "test_allgather_broadcast.py::test_allgather_uneven_first_dimension",
    "test_allgather_broadcast.py::test_allgather_rank_with_no_rows",
    "test_allgather_broadcast.py::test_broadcast_from_every_root",
    "test_barrier_grouped_allgather.py::test_grouped_allgather_mixed_dtypes_uneven_rows",
    "test_barrier_grouped_allgather.py::test_barrier_waits_for_every_rank",
    "test_reducescatter.py::test_reducescatter_uneven_rows",
    "test_reducescatter.py::test_reducescatter_scale_factors_and_fewer_rows_than_ranks",
    "test_reducescatter.py::test_large_reducescatter",
    "test_integer_wrap.py::test_process_set", "test_integer_wrap.py::test_reducescatter",
    "test_integer_wrap.py::test_hierarchical", "test_integer_wrap.py::test_join",
    "test_local_gradients.py::test_tape_reduces_within_its_process_set",
    "test_local_gradients.py::test_tf1_optimizer_outside_its_process_set",
    "test_unnamed_cache.py::test_unnamed_calls_while_a_rank_has_joined",
    "test_unnamed_cache.py::test_a_line_reached_by_one_rank_only",
    "test_sync_batch_norm.py::test_statistics_are_the_global_batchs_with_uneven_batches",
    # Sharded state: blocks that split variables unevenly, which rank's block overflows,
    # which rank joins.
    "test_sharded_optimizer.py::test_apply_equals_the_plain_optimizer_on_averaged_gradients",
    "test_sharded_optimizer.py::test_fit_equals_unsharded_fit",
    "test_sharded_optimizer.py::test_variables_of_several_dtypes_each_rank_holds_its_blocks",
    "test_sharded_optimizer.py::test_loss_scale_skips_on_every_rank_when_one_block_is_not_finite",
    "test_sharded_optimizer.py::test_a_step_while_a_rank_has_joined_fails_saying_so",
    "test_sharded_checkpoints.py::test_checkpoints_hold_the_whole_state_as_unsharded",
    "test_keras_uneven_data.py",               # 10 + 3 r batches on rank r
    "test_keras_training.py::test_fit_matches_one_process_on_the_global_batch[adam]",  # a fit
    # tf_keras (its own stage, TF_USE_LEGACY_KERAS=1): one fit against one process, the
    # counts of accumulation as Horovod makes them, and sharded blocks split unevenly.
    "test_tf_keras.py::test_fit_matches_one_process[legacy-adam]",
    "test_tf_keras.py::test_accumulation_equals_a_larger_batch[adam]",
    "test_tf_keras.py::test_accumulation_counts_every_pass_as_horovod",
    "test_tf_keras.py::test_legacy_optimizer_in_a_tf1_graph_in_horovods_order",
    "test_tf_keras.py::test_aggregation_helper_counts_every_pass_of_a_tf_keras_optimizer",
    "test_tf_keras_sharded.py::test_apply_equals_the_plain_optimizer_on_averaged_gradients",
    "test_tf_keras_sharded.py::test_fit_equals_unsharded_fit",
    "test_tf_keras_sharded.py::test_checkpoints_hold_the_whole_state_and_resume[adam]",
    "test_tf_keras_legacy_sharded.py::test_apply_equals_the_plain_optimizer_on_averaged_gradients",
    "test_tf_keras_legacy_sharded.py::test_checkpoints_hold_the_whole_state_and_resume",
)


def pytest_addoption(parser):
    parser.addoption("--size-dependent", action="store_true",
                     help="only the tests marked size_dependent, without their XLA cases")


def pytest_configure(config):
    config.addinivalue_line("markers", "size_dependent: its outcome depends on the number of "
                                       "ranks; the suite runs it at 3 ranks too")
    tfring.init()
    # With GPU TensorFlow, every rank would put its tensors on GPU:0 of its host, and the
    # first GPU collective would fail (NCCL takes one GPU per rank). The suite's tests are
    # about the host path unless GPU tests are asked for (TFRING_TEST_GPU=1: the suite sets
    # it where nvidia-smi lists GPUs, for tests/parallel/test_gpu.py); then each rank sees
    # only its own GPU, as a user's script pins it.
    if os.environ.get("TFRING_TEST_GPU") == "1":
        tfring.pin_gpu()
    else:
        tf.config.set_visible_devices([], "GPU")


def _is_xla_case(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "xla" in item.name.lower() or any(isinstance(v, str) and v == "xla" for v in params.values())


def _repeats_another_mode(item):
    """An eager or graph case of a test run in a tf.function too: the three run the same
    kernel and runtime, which is where the size matters (offsets, uneven splits), so at 3
    ranks the function case stands for them."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("mode") in ("eager", "graph")


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.split("tests/parallel/")[-1]
        if nodeid.startswith(SIZE_DEPENDENT):
            item.add_marker(pytest.mark.size_dependent)
    if not config.getoption("--size-dependent"):
        return
    # The same selection on every rank: it depends on the node ids alone.
    kept = [i for i in items if i.get_closest_marker("size_dependent") and not _is_xla_case(i)
            and not _repeats_another_mode(i)]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.failed:
        sys.stdout.write(f"\n[rank {tfring.rank()}] FAILED {report.nodeid}:\n{report.longreprtext}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


@pytest.fixture
def rank():
    return tfring.rank()


@pytest.fixture
def size():
    return tfring.size()


@pytest.fixture
def shared_tmp_path(tmp_path, request):
    """Rank 0's pytest tmp_path, for every rank (they share one machine's disk): one directory
    that rank 0 may write and every rank may read, removed with pytest's own."""
    return tfring.broadcast_object(str(tmp_path), 0, name=f"tmp.{request.node.nodeid}")


@pytest.fixture(autouse=True)
def _eager_by_default():
    tf.config.run_functions_eagerly(False)
    yield


def pytest_sessionfinish(session, exitstatus):
    # A rank may finish its tests before the others (running `-k` a selection of process-set
    # tests, the members of a set do more work): its shutdown at exit would fail the others'
    # pending collectives. Every rank waits for all first. (A failing rank never gets here:
    # it has left with os._exit, and mpirun ends the job.)
    if tfring.is_initialized():
        tfring.barrier()
