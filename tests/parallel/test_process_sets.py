"""Process sets: every collective restricted to a subset of ranks, against numpy, in every
mode; sets running at the same time; gradients; errors. Runs at 2 and 3 ranks: the sets are
the even and the odd ranks ([0, 2] and [1] at 3 ranks, [0] and [1] at 2)."""

import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import MODES, rank_input, run


def _sets(size):
    even = tfring.ProcessSet([r for r in range(size) if r % 2 == 0])
    odd = tfring.ProcessSet([r for r in range(size) if r % 2 == 1])
    return even, odd


@pytest.fixture
def my_set(rank, size):
    even, odd = _sets(size)
    return even if rank % 2 == 0 else odd


def test_process_set_api(rank, size, my_set):
    assert my_set.included()
    assert my_set.rank() == my_set.ranks.index(rank)
    assert tfring.global_process_set.ranks == list(range(size))
    assert tfring.global_process_set.size() == size
    assert tfring.ProcessSet([2, 0]).ranks == [0, 2]
    assert int(tfring.size_op()) == size and int(tfring.process_set_included_op()) == 1
    if size == 2:  # [0, 1] is then the global set: a duplicate, as in Horovod
        with pytest.raises(ValueError, match="duplicate process set"):
            tfring.add_process_set([1, 0])
    else:
        registered = tfring.add_process_set([1, 0])
        assert registered == tfring.ProcessSet([0, 1]) and registered.process_set_id > 0
        # Horovod's id-taking ops.
        assert int(tfring.size_op(registered.process_set_id)) == 2
        assert int(tfring.process_set_included_op(registered.process_set_id)) == int(rank < 2)
        assert tfring.remove_process_set(registered) and registered.process_set_id is None
    assert not tfring.remove_process_set(my_set)  # never registered
    with pytest.raises(ValueError, match="no process set has process_set_id"):
        tfring.size_op(12345)
    with pytest.raises(ValueError, match="each rank once"):
        tfring.ProcessSet([0, 0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.int32, tf.float64])
def test_allreduce_in_set(mode, dtype, rank, my_set):
    x = rank_input(rank, (4, 3), dtype)
    got = run(mode, lambda t: tfring.allreduce(t, op=tfring.Sum, name=f"ps.ar.{mode}",
                                               process_set=my_set), x)
    want = sum(rank_input(r, (4, 3), dtype) for r in my_set.ranks)
    np.testing.assert_array_equal(got, want.astype(x.dtype))


@pytest.mark.parametrize("mode", MODES)
def test_average_divides_by_set_size(mode, rank, my_set):
    x = np.full(5, float(rank + 1), np.float64)
    got = run(mode, lambda t: tfring.allreduce(t, name=f"ps.avg.{mode}", process_set=my_set), x)
    np.testing.assert_allclose(got, np.mean([r + 1.0 for r in my_set.ranks]))


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_and_allgather_in_set(mode, rank, my_set):
    a = rank_input(rank, (3,), tf.float32)
    b = rank_input(rank, (rank + 1, 2), tf.int64)

    def fn(x, y):
        return (tfring.grouped_allreduce([x, x * 2], op=tfring.Sum, name=f"ps.gar.{mode}",
                                         process_set=my_set),
                tfring.allgather(y, name=f"ps.ag.{mode}", process_set=my_set))
    (s1, s2), gathered = run(mode, fn, a, b)
    want = sum(rank_input(r, (3,), tf.float32) for r in my_set.ranks)
    np.testing.assert_array_equal(s1, want)
    np.testing.assert_array_equal(s2, want * 2)
    np.testing.assert_array_equal(
        gathered, np.concatenate([rank_input(r, (r + 1, 2), tf.int64) for r in my_set.ranks]))


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_from_every_member(mode, rank, my_set):
    for root in my_set.ranks:
        x = rank_input(rank, (2, 2), tf.float32)
        got = run(mode, lambda t: tfring.broadcast(t, root, name=f"ps.bc.{mode}.{root}",
                                                   process_set=my_set), x)
        np.testing.assert_array_equal(got, rank_input(root, (2, 2), tf.float32))


@pytest.mark.parametrize("mode", MODES)
def test_reducescatter_and_alltoall_in_set(mode, rank, my_set):
    n = my_set.size()
    x = rank_input(rank, (2 * n + 1, 2), tf.float32)
    rows = [2 * n + 1 for _ in range(n)]
    split = [rows[0] // n + (1 if p < rows[0] % n else 0) for p in range(n)]
    pos = my_set.rank()

    def fn(t):
        return (tfring.reducescatter(t, op=tfring.Sum, name=f"ps.rs.{mode}", process_set=my_set),
                tfring.alltoall(t[:n], name=f"ps.a2a.{mode}", process_set=my_set))
    scattered, received = run(mode, fn, x)
    total = sum(rank_input(r, (2 * n + 1, 2), tf.float32) for r in my_set.ranks)
    start = sum(split[:pos])
    np.testing.assert_array_equal(scattered, total[start:start + split[pos]])
    # Each member sent row `pos` of its first n rows to me.
    np.testing.assert_array_equal(
        received, np.stack([rank_input(r, (2 * n + 1, 2), tf.float32)[pos]
                            for r in my_set.ranks]))


def test_barrier_in_set(rank, size, shared_tmp_path):
    # The set is every rank but the last. Its last member (at 3 ranks or more) enters 0.3 s
    # late: no member may leave before it entered. The last rank, outside the set, calls
    # nothing until every member has left the barrier (each leaves a file saying so): a
    # barrier that needed it would never end, and the wait below fails after 60 s.
    members = list(range(size - 1))
    the_set = tfring.ProcessSet(members)
    tfring.barrier(name="ps.barrier.line_up")
    entered = left = float("nan")
    if rank in members:
        if rank == members[-1] and len(members) > 1:
            time.sleep(0.3)
        entered = time.time()  # every rank on one host: one clock
        tfring.barrier(name="ps.barrier", process_set=the_set)
        left = time.time()
        open(os.path.join(shared_tmp_path, f"left.{rank}"), "w").close()
    else:
        deadline = time.time() + 60
        while not all(os.path.exists(os.path.join(shared_tmp_path, f"left.{r}"))
                      for r in members):
            assert time.time() < deadline, "the set's barrier waited for a rank outside it"
            time.sleep(0.01)
    times = tfring.allgather(np.array([[entered, left]]), name="ps.barrier.times").numpy()
    times = times[members]
    assert times[:, 1].min() >= times[:, 0].max(), times


def test_sets_run_concurrently_with_the_same_names(rank, size):
    """Two overlapping sets and the global set at once, from threads, under the same tensor
    names: each must get its own members' sum."""
    sets = [tfring.ProcessSet([r for r in range(size) if r != size - 1] or [0]),
            tfring.ProcessSet([r for r in range(size) if r != 0] or [0]),
            tfring.global_process_set]
    results, errors = {}, []

    def work(i, ps):
        try:
            for step in range(5):
                x = tf.constant([float(rank + 1 + step)] * 4)
                results[(i, step)] = tfring.allreduce(x, op=tfring.Sum, name=f"ps.conc.{step}",
                                                      process_set=ps).numpy()
        except Exception as e:  # reported below, on the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i, ps))
               for i, ps in enumerate(sets) if rank in ps.ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i, ps in enumerate(sets):
        if rank not in ps.ranks:
            continue
        for step in range(5):
            want = sum(r + 1.0 + step for r in ps.ranks)
            np.testing.assert_array_equal(results[(i, step)], np.full(4, want))


def test_gradients_stay_in_the_set(rank, my_set):
    x = tf.constant(rank_input(rank, (3,), tf.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tfring.allreduce(x, op=tfring.Sum, name="ps.grad.ar", process_set=my_set)
        g = tfring.allgather(x, name="ps.grad.ag", process_set=my_set)
        loss = tf.reduce_sum(y * 2.0) + tf.reduce_sum(g * 3.0)
    dx = tape.gradient(loss, x)
    # Horovod's definitions, within the set: the allreduce's gradient sums the members' (2
    # each), the allgather's averages them (3).
    np.testing.assert_array_equal(dx.numpy(), np.full(3, 2.0 * my_set.size() + 3.0))


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_reducescatter_gradient_in_set(op_name, dtype, mode, rank, my_set):
    # Horovod's definition: the upstream gradient of every member's block, gathered in the
    # set's rank order, times the set's size for Sum. Each member's upstream differs (small
    # multiples of 1/4, exact in float16 and after the scaling), so a gradient that used
    # only this rank's upstream, or gathered across the wrong ranks, would not match.
    op = {"Sum": tfring.Sum, "Average": tfring.Average}[op_name]
    n = my_set.size()
    for dims in (1, 2, 3):
        shape = [4 * n] + [3] * (dims - 1)
        values = rank_input(rank, shape, dtype)
        upstream = {r: rank_input(r + 50, [4] + shape[1:], dtype, low=-4, high=5)
                    for r in my_set.ranks}

        def grad_of(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = tfring.reducescatter(x, op=op, process_set=my_set)
            assert out.shape[0] == 4
            return tape.gradient(out, x, output_gradients=tf.constant(upstream[rank]))

        if mode == "eager":
            got = grad_of(tf.constant(values)).numpy()
        else:
            with tf.Graph().as_default():
                x = tf.constant(values)
                out = tfring.reducescatter(x, op=op, process_set=my_set)
                g = tf.gradients(out, x, grad_ys=tf.constant(upstream[rank]))[0]
                with tf.compat.v1.Session() as session:
                    got = session.run(g)
        want = np.concatenate([upstream[r] for r in my_set.ranks]) * (n if op_name == "Sum"
                                                                         else 1)
        assert got.dtype == values.dtype and got.shape == tuple(shape)
        np.testing.assert_array_equal(got, want.astype(values.dtype))


def test_registration_misuse_raises_horovods_value_error(rank, size):
    # As Horovod's process-set tests: duplicates (in any order; all ranks are the global
    # set), a removed set, and an id no registered set has are ValueErrors, raised on the
    # caller's rank before anything reaches the other ranks.
    last = tfring.add_process_set(range(1, size))
    with pytest.raises(ValueError, match="duplicate process set"):
        tfring.add_process_set(range(size - 1, 0, -1))
    with pytest.raises(ValueError, match="duplicate process set"):
        tfring.add_process_set(range(size))
    assert tfring.remove_process_set(last) and not tfring.remove_process_set(last)
    assert not tfring.remove_process_set(tfring.global_process_set)
    if rank != 0:
        with pytest.raises(ValueError, match="was removed with remove_process_set"):
            tfring.allreduce(tf.ones(2), process_set=last)
    fake = tfring.ProcessSet([0])
    fake.process_set_id = 10
    with pytest.raises(ValueError, match="process_set_id=10, which no registered"):
        tfring.allreduce(tf.ones(2), process_set=fake)
    # Added again, the removed set works.
    again = tfring.add_process_set(last)
    assert again is last and last.process_set_id is not None
    if rank != 0:
        got = tfring.allreduce(tf.ones(2), op=tfring.Sum, process_set=last)
        np.testing.assert_array_equal(got, [size - 1.0] * 2)
    assert tfring.remove_process_set(last)


def test_set_errors(rank, size, my_set):
    others = [r for r in range(size) if r not in my_set.ranks]
    if others:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=f"rank {rank} is not in the process set"):
            tfring.allreduce(tf.ones(2), process_set=tfring.ProcessSet(others))
        with pytest.raises(ValueError, match="is not in the process set"):
            tfring.broadcast(tf.ones(2), others[0], process_set=my_set)
    with pytest.raises(ValueError, match="names ranks the job does not have"):
        tfring.allreduce(tf.ones(2), process_set=tfring.ProcessSet([rank, size + 3]))


def test_mismatch_in_set_names_the_set_and_ranks(rank, size, my_set):
    if my_set.size() < 2:
        pytest.skip("needs a set of two ranks (runs at 3 ranks: [0, 2])")
    x = tf.ones([2 + my_set.rank()])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'ps.bad \[process set 0, 2\]'"):
        tfring.allreduce(x, name="ps.bad", process_set=my_set)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_a_function_traced_before_the_ranks_were_renumbered_is_refused(rank, jit):
    # tfring.elastic renumbers the ranks at a reset (process_sets.new_world), and a function
    # traced before holds its set's old ranks: the kernel (under XLA, the compiled call)
    # refuses it in the words Python uses for the set. The renumbering is imitated here by
    # the library's counter alone, so Python's own check lets the call through.
    if rank != 0:
        return
    solo = tfring.ProcessSet([0])

    @tf.function(jit_compile=jit)
    def total():
        return tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name=f"solo_{jit}",
                                process_set=solo)

    assert total().numpy().tolist() == [1.0]
    tfring._process.runtime.set_process_set_world(1)
    try:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=rf"'solo_{jit}': process set \[0\] was made before the job "
                                 r"lost a worker \(a tfring.elastic reset\)"):
            total()
    finally:
        tfring._process.runtime.set_process_set_world(0)
    assert total().numpy().tolist() == [1.0]
