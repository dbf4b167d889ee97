"""One process: tfring.keras's public names, its numpy helpers, and gradient naming."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
from tfring._training import gradients
from tfring.keras import _epoch_end, callbacks


def test_every_public_keras_name_exists_and_is_documented():
    for module, names in ((hvd, hvd.__all__), (callbacks, callbacks.__all__)):
        for name in names:
            obj = getattr(module, name)
            if callable(obj):
                assert obj.__doc__ and obj.__doc__.strip(), f"{module.__name__}.{name}"


def test_horovod_basics_are_reexported():
    for name in ("init", "shutdown", "size", "rank", "local_size", "local_rank", "Average",
                 "Sum", "Compression", "DistributedOptimizer", "callbacks", "load_model"):
        assert hasattr(hvd, name), name


def test_values_helpers_take_values_and_give_tensors():
    tfring.init()
    out = hvd.allreduce(np.array([1.0, 3.0], np.float32), name="unit.values.ar")
    assert isinstance(out, tf.Tensor)  # as Horovod's in eager mode: .numpy() works
    np.testing.assert_array_equal(out.numpy(), [1.0, 3.0])
    half = hvd.allreduce(0.5, name="unit.values.float")
    assert half.dtype == tf.float32 and float(half) == 0.5
    np.testing.assert_array_equal(hvd.allgather(np.arange(3), name="unit.values.ag"),
                                  np.arange(3))
    assert isinstance(hvd.broadcast(tf.constant([2]), 0, name="unit.values.bc"), tf.Tensor)


def test_gradient_names_ignore_per_process_layer_numbers():
    class V:
        def __init__(self, path):
            self.path = path

    a = gradients.gradient_names("k", [V("sequential_3/dense_12/kernel"), V("dense_2/bias")])
    b = gradients.gradient_names("k", [V("sequential/dense/kernel"), V("dense/bias")])
    assert a == b
    assert a[0].endswith(".0.sequential/dense/kernel") and a[1].endswith(".1.dense/bias")
    other = gradients.gradient_names("k", [V("sequential/dense/kernel")])
    assert other[0] != a[0]  # a different variable list gets different names


def test_wrapper_round_trips_its_config():
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), backward_passes_per_step=3,
                                   compression=hvd.Compression.fp16, op=hvd.Sum)
    config = opt.get_config()
    assert config["compression"] == "fp16" and config["backward_passes_per_step"] == 3
    again = hvd.DistributedKerasOptimizer.from_config(config)
    assert again.backward_passes_per_step == 3
    assert isinstance(again.inner_optimizer, keras.optimizers.Adam)
    assert float(again.learning_rate) == pytest.approx(0.01)


def test_horovod_keras_names():
    import tfring.keras as hvd
    for name in ("ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
                 "mpi_enabled", "gloo_built", "gloo_enabled", "ccl_built", "ddl_built",
                 "cuda_built", "rocm_built", "reducescatter", "is_version_greater_equal_than"):
        assert hasattr(hvd, name), name
    assert hvd.is_version_greater_equal_than("2.21.0", "2.16.0")
    assert not hvd.is_version_greater_equal_than("2.16.0rc1", "2.16.0")
    with pytest.raises(ValueError, match="two strings"):
        hvd.is_version_greater_equal_than(2.16, "2.16.0")
    hvd.init()
    np.testing.assert_array_equal(hvd.reducescatter(np.ones((3, 2))), np.ones((3, 2)))
    assert hvd.allreduce(2.0, compression=hvd.Compression.fp16) == 2.0


def test_epoch_state_goes_with_its_model():
    import gc

    tfring.init()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    callback = hvd.callbacks.MetricAverageCallback()
    callback.set_model(model)
    callback.on_epoch_begin(0)
    assert _epoch_end._epochs[model] == {"start": 0, "joined": False}
    assert len(_epoch_end._epochs) == 1
    del callback, model
    gc.collect()
    assert len(_epoch_end._epochs) == 0  # a new model reusing the id finds no stale state


def test_tape_accumulators_go_with_their_variables():
    import gc

    from tfring._training import gradient_tape

    tfring.init()
    before = len(gradient_tape._ACCUMULATORS)
    v = tf.Variable([1.0, 2.0])
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        tape = tfring.DistributedGradientTape(tape, backward_passes_per_step=2)
        tape.gradient(loss, [v])
    assert len(gradient_tape._ACCUMULATORS) == before + 1  # one per variable list, reused
    del v, tape
    gc.collect()
    assert len(gradient_tape._ACCUMULATORS) == before
