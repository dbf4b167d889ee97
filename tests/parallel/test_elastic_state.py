"""tfring.elastic's state objects and `run` with no worker lost (the recovery itself is in
tests/failure: it needs a rank to die under `mpirun --with-ft ulfm`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring import elastic


def test_object_state_syncs_from_rank_zero_and_rolls_back_to_its_commit():
    state = elastic.ObjectState(epoch=10 + tfring.rank(), name=f"rank{tfring.rank()}")
    state.sync()
    assert (state.epoch, state.name) == (10, "rank0")
    state.epoch = 11
    state.commit()
    state.epoch = 99
    state.restore()
    assert state.epoch == 11


def _model(seed):
    tf.random.set_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1, momentum=0.9)  # momentum: the optimizer has state too
    opt.build(model.trainable_variables)
    return model, opt


def test_keras_state_syncs_model_and_optimizer_and_restores_the_commit():
    model, opt = _model(seed=tfring.rank())
    for v in opt.variables:
        v.assign(tf.fill(v.shape, tf.cast(tfring.rank() + 1, v.dtype)))
    state = elastic.TensorFlowKerasState(model, opt, batch=tfring.rank())
    state.sync()
    root = tfring.broadcast_object([v.numpy() for v in model.variables + opt.variables], 0)
    for v, want in zip(model.variables + opt.variables, root):
        np.testing.assert_array_equal(v.numpy(), want)
    assert state.batch == 0
    committed = [v.numpy().copy() for v in model.variables + opt.variables]
    state.batch = 5
    state.commit()
    for v in model.variables + opt.variables:
        v.assign(v + tf.ones_like(v))
    state.batch = 6
    state.restore()
    assert state.batch == 5
    for v, want in zip(model.variables + opt.variables, committed):
        np.testing.assert_array_equal(v.numpy(), want)


def test_keras_state_needs_a_built_model():
    with pytest.raises(ValueError, match="built model"):
        elastic.TensorFlowKerasState(keras.Sequential([keras.layers.Dense(2)]))


def test_run_syncs_once_and_returns_what_the_function_returns():
    state = elastic.ObjectState(step=tfring.rank())
    resets = []
    state.register_reset_callbacks([lambda: resets.append(1)])
    calls = []

    @elastic.run
    def train(state, scale):
        calls.append(state.step)
        return state.step * scale

    assert train(state, 3) == 0
    assert calls == [0] and resets == []


def test_run_lets_other_errors_through():
    state = elastic.ObjectState(step=0)

    @elastic.run
    def bad_argument(state):
        tfring.broadcast(tf.constant([1.0]), root_rank=tfring.size() + 5)

    with pytest.raises(ValueError):
        bad_argument(state)

    @elastic.run
    def raises(state):
        raise KeyError("not a lost worker")

    with pytest.raises(KeyError):
        raises(state)


def test_keras_elastic_sync_gives_a_joiner_the_optimizer_state(rank):
    import tfring.keras as hvd
    from _elastic_fit import check_sync_gives_a_joiner_the_optimizer_state

    check_sync_gives_a_joiner_the_optimizer_state(hvd, rank)


def test_keras_elastic_callbacks_commit_and_count_in_fit(rank, size):
    import tfring.keras as hvd
    from _elastic_fit import check_elastic_callbacks

    check_elastic_callbacks(hvd, rank, size)


def test_tensorflow_state_of_eager_variables_syncs_commits_and_restores(rank):
    v = tf.Variable([float(rank), 2.0 * rank])
    step = tf.Variable(rank, dtype=tf.int64)
    state = elastic.TensorFlowState([v, step], batch=rank)
    state.sync()  # rank 0's values everywhere
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])
    assert step.numpy() == 0 and state.batch == 0
    v.assign([1.0, 3.0])
    state.batch = 4
    state.commit()
    v.assign([9.0, 9.0])
    state.batch = 7
    state.restore()
    np.testing.assert_array_equal(v.numpy(), [1.0, 3.0])
    assert state.batch == 4
    with pytest.raises(ValueError, match="needs its variables in eager mode"):
        elastic.TensorFlowState()
