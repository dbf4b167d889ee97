"""GPU tensors end to end through TensorFlow: the GPU kernels, NCCL (or MPI staging), and
stream ordering, against numpy. They need a GPU build of TensorFlow, an NVIDIA GPU per rank
and a tfring build with NCCL; elsewhere (CI: tensorflow-cpu, no GPU) they skip and say why.
The runtime's GPU path without TensorFlow is tested natively: tests/cpp/test_nccl_runtime.cc.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import rank_input


def _why_not():
    """Why the GPU tests cannot run here ('' where they can)."""
    if not tfring.nccl_built():
        return "tfring was built without NCCL (BUILD.md, 'GPU (NCCL)')"
    if os.environ.get("TFRING_TEST_GPU") != "1":
        return ("GPU tests not asked for (TFRING_TEST_GPU=1; the suite sets it where "
                "nvidia-smi lists GPUs)")
    # conftest.py has pinned this rank to its GPU: the only one it sees.
    if not tf.config.get_visible_devices("GPU"):
        return ("no GPU visible to TensorFlow (tensorflow-cpu, or no NVIDIA GPU): the GPU "
                "kernels are built but cannot run")
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not())


@pytest.fixture
def gpu():
    return "/GPU:0"  # this rank's own GPU: the only one it sees (conftest.py pins it)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("op_name", ["Sum", "Average", "Max"])
def test_allreduce_on_gpu(gpu, dtype, op_name, rank, size):
    op = {"Sum": tfring.Sum, "Average": tfring.Average, "Max": tfring.Max}[op_name]
    stack = np.stack([rank_input(r, (4, 3), dtype).astype(np.float64) for r in range(size)])
    want = {"Sum": stack.sum(0), "Max": stack.max(0),
            "Average": np.trunc(stack.sum(0) / size) if dtype.is_integer else stack.mean(0)}[op_name]

    @tf.function
    def step(x):
        return tfring.allreduce(x * 1, op=op, name=f"gpu.{dtype.name}.{op_name}")

    with tf.device(gpu):
        x = tf.constant(rank_input(rank, (4, 3), dtype))
        eager = tfring.allreduce(x * 1, op=op)
        graph = step(x)
    if dtype != tf.int32:
        # TensorFlow keeps int32 tensors in host memory even on a GPU (its GPU kernels take
        # them there), so only the other dtypes must come out in GPU memory.
        assert "GPU" in eager.device and "GPU" in graph.device
    for got in (eager, graph):
        assert got.dtype == dtype
        got = got.numpy().astype(np.float64)
        if op_name == "Average" and dtype.is_floating:
            # 1/size is inexact in binary: one rounding in float32, a few float16 ulps
            # (2**-10 relative each) where NCCL scales in half precision.
            tolerance = 1e-6 if dtype == tf.float32 else 2e-3
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
        else:
            # Sums and maxima of rank_input's values (quarters) are exact in every dtype
            # here, and an integer Average truncates as numpy's: nothing to tolerate.
            np.testing.assert_array_equal(got, want)


def test_allgather_uneven_broadcast_and_grouped_on_gpu(gpu, rank, size):
    with tf.device(gpu):
        gathered = tfring.allgather(tf.fill([rank + 1, 2], float(rank)))
        root = size - 1
        bcast = tfring.broadcast(tf.fill([3], float(rank)), root_rank=root)
        grouped = tfring.grouped_allreduce([tf.fill([2], float(rank)), tf.fill([5], 1.0)],
                                           op=tfring.Sum)
    want = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(size)])
    np.testing.assert_array_equal(gathered.numpy(), want)
    np.testing.assert_array_equal(bcast.numpy(), np.full(3, float(root)))
    np.testing.assert_array_equal(grouped[0].numpy(), np.full(2, sum(range(size))))
    np.testing.assert_array_equal(grouped[1].numpy(), np.full(5, float(size)))


def test_training_on_gpu_matches_numpy_on_every_rank(gpu, rank, size):
    with tf.device(gpu):
        w = tf.Variable(tf.fill([4, 1], 0.5 + rank))  # differ until broadcast
        tfring.broadcast_variables([w], root_rank=0)
        opt = tf.keras.optimizers.SGD(0.1)
        x = tf.constant(rank_input(rank, (8, 4), tf.float32))
        for _ in range(3):
            with tfring.DistributedGradientTape(tf.GradientTape()) as tape:
                loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        assert "GPU" in w.device
        everyone = tfring.allgather(tf.reshape(w, [1, 4])).numpy()
    # The tape averages each rank's gradient 2/8 X_r^T X_r w.
    xs = [rank_input(r, (8, 4), tf.float32).astype(np.float64) for r in range(size)]
    want = np.full((4, 1), 0.5)
    for _ in range(3):
        want = want - 0.1 * np.mean([2 / 8 * x.T @ x @ want for x in xs], axis=0)
    for r in range(size):
        np.testing.assert_array_equal(everyone[r], everyone[0])
    np.testing.assert_allclose(everyone[0], want[:, 0], rtol=1e-5)


def test_int16_on_a_gpu_runs_through_the_cpu_kernel(gpu, rank, size):
    # NCCL has no 16-bit integers: TensorFlow places the op's CPU kernel (the GPU kernel's
    # type constraint leaves int16 out) instead of failing at run time.
    with tf.device(gpu):
        got = tfring.allreduce(tf.constant([rank, 1000], tf.int16), op=tfring.Sum)
    assert got.dtype == tf.int16
    np.testing.assert_array_equal(got.numpy(), [sum(range(size)), 1000 * size])


def test_a_tf1_graph_on_the_gpu_places_every_op_without_soft_placement(gpu, rank, size):
    graph = tf.Graph()
    with graph.as_default(), tf.device(gpu):
        total = tfring.allreduce(tf.constant([float(rank)]), op=tfring.Sum, name="tf1.gpu.sum")
        with tf.control_dependencies([total]):
            barrier = tfring.barrier(name="tf1.gpu.barrier")
        layout = [tfring.size_op(), tfring.rank_op(), tfring.local_size_op(),
                  tfring.local_rank_op()]
        with tf.control_dependencies([barrier]):
            last = tfring.join()
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        got_total, got_layout, got_last = session.run([total, layout, last])
    assert got_total.tolist() == [float(sum(range(size)))]
    assert got_layout == [size, rank, tfring.local_size(), tfring.local_rank()]
    assert 0 <= got_last < size
