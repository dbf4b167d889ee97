"""How unnamed ops are named: from the graph in graphs (as Horovod), by the runtime eagerly."""

import os
import re
import sys

import tensorflow as tf

import tfring
from tfring._ops import naming


def _tensor_names(graph, op_type):
    return [n.attr["tensor_name"].s.decode() for n in graph.as_graph_def().node
            if n.op == op_type]


def test_graph_names_come_from_the_graph_not_the_process_history():
    def build():
        g = tf.Graph()
        with g.as_default():
            x = tf.constant([1.0], name="x")
            with tf.name_scope("scope"):
                tfring.allreduce(x)
                tfring.allreduce(x)   # the same input twice: unique within the graph
            tfring.allgather(x, ignore_name_scope=True)
            tfring.grouped_allreduce([x, x * 2])
            tfring.broadcast(x, 0)
        return g

    first = build()
    # Another graph built in between (a rank-0-only eval graph, say) changes nothing.
    with tf.Graph().as_default():
        tfring.allreduce(tf.constant([2.0], name="x"))
    second = build()
    for op in ("TfringAllreduce", "TfringAllgather", "TfringGroupedAllreduce",
               "TfringBroadcast"):
        assert _tensor_names(first, op) == _tensor_names(second, op)
    assert _tensor_names(first, "TfringAllreduce") == [
        "scope/TfringAllreduce_x_0", "scope/TfringAllreduce_x_0.1"]
    assert _tensor_names(first, "TfringAllgather") == ["TfringAllgather_x_0"]
    assert _tensor_names(first, "TfringGroupedAllreduce") == [
        "TfringGroupedAllreduce_x_0_mul_0"]


def test_graph_names_leave_out_per_process_numbers():
    # Keras numbers layers per process ("dense_7"); a rank that made more layers before has
    # other numbers, and TF numbers ops per graph ("MatMul_1"): neither enters the name.
    import keras

    def names_after(extra_layers):
        for _ in range(extra_layers):
            keras.layers.Dense(1)
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2),
                                  keras.layers.Dense(1)])

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            return [tfring.allreduce(g) for g in tape.gradient(loss, model.trainable_variables)]

        return _tensor_names(step.get_concrete_function(tf.TensorSpec([1, 2])).graph,
                             "TfringAllreduce")

    first, second = names_after(0), names_after(3)
    assert first == second and len(set(first)) == 4, (first, second)
    assert not any(re.search(r"(dense|sequential)_\d|MatMul_[1-9]", n) for n in first), first


def test_a_retraced_function_gets_the_same_names():
    @tf.function
    def step(x):
        return tfring.allreduce(tf.reduce_sum(x))

    full = step.get_concrete_function(tf.TensorSpec([4]))
    short = step.get_concrete_function(tf.TensorSpec([3]))  # a shorter last batch
    assert _tensor_names(full.graph, "TfringAllreduce") == \
        _tensor_names(short.graph, "TfringAllreduce") == ["TfringAllreduce_Sum_0"]


def test_eager_calls_carry_their_call_site_not_a_name():
    n = naming.op_naming("allreduce")
    assert n.tensor_name == "" and n.cacheable is False
    assert n.call_site.startswith("test_naming.py:")
    assert naming.op_naming("allreduce", name="given")[:2] == ("given", True)


def test_unnamed_eager_calls_reuse_one_kernel():
    # The attributes of an unnamed eager call are the same from call to call, so TensorFlow
    # builds its kernel once; the runtime numbers the calls.
    tfring.init()
    for i in range(3):
        assert tfring.allreduce(tf.constant([float(i)]), op=tfring.Sum).numpy()[0] == i


def test_a_captured_eager_tensor_is_named_alike_whatever_the_process_made_before():
    # TF names the constant a function makes of a captured eager tensor by a process-wide
    # counter ("3:0"), which differs between ranks that made different numbers of tensors.
    def names_after(extra_tensors):
        for _ in range(extra_tensors):
            tf.constant(0.0)
        x = tf.constant([1.0])
        f = tf.function(lambda: [tfring.allreduce(x), tfring.allreduce(x)])
        return _tensor_names(f.get_concrete_function().graph, "TfringAllreduce")

    first, second = names_after(0), names_after(5)
    assert first == second == ["TfringAllreduce_captured_0", "TfringAllreduce_captured_0.1"], \
        (first, second)


def _public(kind):
    """Stands for a public collective whose unnamed eager path asks for its caller's site."""
    return _path(kind)


def _path(kind):
    return naming.eager_unnamed(kind, 2)


def test_an_unnamed_eager_call_is_known_by_the_line_that_made_it():
    sites = [_public("allreduce") for _ in range(3)]  # one line, three calls
    other = _public("allreduce")
    line = sys._getframe().f_lineno
    assert sites[0] == sites[1] == sites[2] == (
        f"test_naming.py:{line - 2}", f"unnamed allreduce at test_naming.py:{line - 2}")
    assert other[0] == f"test_naming.py:{line - 1}"
    assert _public("broadcast")[1].startswith("unnamed broadcast at test_naming.py:")


def test_an_unnamed_call_through_a_library_wrapper_is_known_by_the_user_line(monkeypatch):
    # A wrapper inside a library (Keras's, or tfring's own): the site is the line above it,
    # which differs from call to call, so the wrapper's own line must not be remembered.
    wrapper_dir = os.path.join(os.sep, "some_library", "")
    monkeypatch.setattr(naming, "_LIBRARY_DIRS", naming._LIBRARY_DIRS + (wrapper_dir,))
    scope = {"public": _public}
    exec(compile("def wrapper(kind):\n    return public(kind)\n",
                 os.path.join(wrapper_dir, "wrapper.py"), "exec"), scope)
    first = scope["wrapper"]("allreduce")
    second = scope["wrapper"]("allreduce")
    line = sys._getframe().f_lineno
    assert first[0] == f"test_naming.py:{line - 2}"
    assert second[0] == f"test_naming.py:{line - 1}"
