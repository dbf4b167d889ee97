"""GPU tensors end to end through TensorFlow: the GPU kernels, NCCL (or MPI staging), and
stream ordering, against numpy. They need a GPU build of TensorFlow, an NVIDIA GPU per rank
and a tfring build with NCCL; elsewhere (CI: tensorflow-cpu, no GPU) they skip and say why.
The runtime's GPU path without TensorFlow is tested natively: tests/cpp/test_nccl_runtime.cc.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import rank_input

GPUS = tf.config.list_physical_devices("GPU")
pytestmark = [
    pytest.mark.skipif(not tfring.nccl_built(),
                       reason="tfring was built without NCCL (BUILD.md, 'GPU (NCCL)')"),
    pytest.mark.skipif(not GPUS, reason="no GPU visible to TensorFlow (tensorflow-cpu, or no "
                                        "NVIDIA GPU): the GPU kernels are built but cannot run"),
]


@pytest.fixture
def gpu():
    if len(GPUS) < tfring.local_size():
        pytest.skip(f"{tfring.local_size()} ranks on this host but {len(GPUS)} GPU(s); "
                    "NCCL needs one GPU per rank")
    return f"/GPU:{tfring.local_rank()}"


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


def test_training_on_gpu_ends_with_identical_weights(gpu, rank, size):
    with tf.device(gpu):
        w = tf.Variable(tf.fill([4, 1], 0.5 + rank))  # differ until broadcast
        tfring.broadcast_variables([w], root_rank=0)
        opt = tf.keras.optimizers.SGD(0.1)
        x = tf.constant(rank_input(rank, (8, 4), tf.float32))
        for _ in range(3):
            with tfring.DistributedGradientTape(tf.GradientTape()) as tape:
                loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    everyone = tfring.allgather(tf.reshape(w, [1, 4])).numpy()
    for r in range(size):
        np.testing.assert_array_equal(everyone[r], everyone[0])
