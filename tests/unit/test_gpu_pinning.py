"""tfring.pin_gpu() and the GPU kernels' registration, checked without a GPU.

pin_gpu's decisions are made from what TensorFlow lists, so the tests give it lists of
made-up GPUs and record what it asks TensorFlow to do. The kernel registry is TensorFlow's
own: tensorflow-cpu lists the GPU kernels a library registers even where no GPU exists.
"""

import pytest
import tensorflow as tf

import tfring
from tfring._process import gpu_pinning


class FakeGpu:
    def __init__(self, index):
        self.name = f"/physical_device:GPU:{index}"
        self.device_type = "GPU"

    def __repr__(self):
        return self.name


@pytest.fixture
def machine(monkeypatch):
    """A host with `gpus` GPUs and this process at `local_rank` of `local_size`; records
    what pin_gpu sets. `refuse` makes TensorFlow refuse changes (it has used the GPUs)."""
    state = {"gpus": [], "visible": None, "growth": [], "refuse": False}

    def configure(gpus, local_rank, local_size, refuse=False):
        state["gpus"] = [FakeGpu(i) for i in range(gpus)]
        state["visible"] = list(state["gpus"])
        state["refuse"] = refuse
        state["growth"] = []
        monkeypatch.setattr(gpu_pinning.runtime, "local_rank", lambda: local_rank)
        monkeypatch.setattr(gpu_pinning.runtime, "local_size", lambda: local_size)
        monkeypatch.setattr(gpu_pinning.runtime, "rank", lambda: 10 + local_rank)
        return state

    def set_visible(device, kind):
        assert kind == "GPU"
        if state["refuse"]:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        state["visible"] = [device]

    def set_growth(device, on):
        if state["refuse"]:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        state["growth"].append((device, on))

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: list(state["gpus"]))
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind: list(state["visible"]))
    monkeypatch.setattr(tf.config, "set_visible_devices", set_visible)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", set_growth)
    return configure


def test_each_local_rank_gets_its_own_gpu_with_memory_growth(machine):
    for local_rank in range(4):
        state = machine(gpus=4, local_rank=local_rank, local_size=4)
        assert tfring.pin_gpu() == "/GPU:0"
        assert state["visible"] == [state["gpus"][local_rank]]
        assert state["growth"] == [(state["gpus"][local_rank], True)]


def test_fewer_ranks_than_gpus_uses_the_first_ones(machine):
    state = machine(gpus=8, local_rank=1, local_size=2)
    tfring.pin_gpu(memory_growth=False)
    assert state["visible"] == [state["gpus"][1]]
    assert state["growth"] == []


def test_one_visible_gpu_is_kept_whatever_the_local_rank(machine):
    # A launcher that gives each rank its own GPU (CUDA_VISIBLE_DEVICES per rank) leaves each
    # process one GPU, at index 0, whatever its local rank.
    state = machine(gpus=1, local_rank=3, local_size=4)
    assert tfring.pin_gpu() == "/GPU:0"
    assert state["visible"] == [state["gpus"][0]]


def test_no_gpu_is_no_pinning(machine):
    state = machine(gpus=0, local_rank=1, local_size=2)
    assert tfring.pin_gpu() is None
    assert state["visible"] == [] and state["growth"] == []


def test_more_ranks_than_gpus_is_refused_with_the_counts(machine):
    machine(gpus=2, local_rank=2, local_size=3)
    with pytest.raises(ValueError, match=r"3 ranks run on this host but it has 2 GPUs.*-npernode"):
        tfring.pin_gpu()


def test_pinning_after_tensorflow_used_the_gpus_says_when_to_call_it(machine):
    machine(gpus=2, local_rank=1, local_size=2, refuse=True)
    with pytest.raises(RuntimeError, match=r"rank 11 came too late.*GPU:1.*right after "
                                           r"tfring.init\(\), before any TensorFlow op"):
        tfring.pin_gpu()


def test_pinning_twice_changes_nothing_the_second_time(machine):
    state = machine(gpus=2, local_rank=1, local_size=2)
    tfring.pin_gpu()
    state["refuse"] = True  # TensorFlow has started: a change would raise
    assert tfring.pin_gpu() == "/GPU:0"
    assert state["visible"] == [state["gpus"][1]]


def _gpu_kernels(op):
    from tensorflow.python.framework import kernels
    return [k for k in kernels.get_registered_kernels_for_op(op).kernel if k.device_type == "GPU"]


NCCL_DTYPES = {d.as_datatype_enum for d in (tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16,
                                            tf.bfloat16, tf.float32, tf.float64)}
needs_nccl_build = pytest.mark.skipif(
    not tfring.nccl_built(), reason="this build has no GPU path (BUILD.md, 'GPU (NCCL)'), so "
                                    "no GPU kernels are registered")


@needs_nccl_build
@pytest.mark.parametrize("op,with_bool", [
    ("TfringAllreduce", False), ("TfringGroupedAllreduce", False),
    ("TfringReducescatter", False), ("TfringAllgather", True),
    ("TfringGroupedAllgather", True), ("TfringBroadcast", True), ("TfringAlltoall", True)])
def test_gpu_data_kernels_take_only_the_dtypes_nccl_has(op, with_bool):
    # int16/uint16 tensors on a GPU must get the CPU kernel (TensorFlow copies them), not a
    # GPU kernel that refuses them when it runs.
    (kernel,) = _gpu_kernels(op)
    (constraint,) = [c for c in kernel.constraint if c.name == "T"]
    allowed = set(constraint.allowed_values.list.type)
    assert allowed == NCCL_DTYPES | ({tf.bool.as_datatype_enum} if with_bool else set())
    assert tf.int16.as_datatype_enum not in allowed and tf.uint16.as_datatype_enum not in allowed


@needs_nccl_build
@pytest.mark.parametrize("op,host_args", [
    ("TfringBarrier", []), ("TfringJoin", ["last_joined"]), ("TfringSize", ["value"]),
    ("TfringRank", ["value"]), ("TfringLocalSize", ["value"]), ("TfringLocalRank", ["value"])])
def test_ops_without_tensor_data_have_gpu_kernels_in_host_memory(op, host_args):
    # A TF1 graph under tf.device('/gpu:0') without soft placement needs a GPU kernel for
    # every op it holds.
    (kernel,) = _gpu_kernels(op)
    assert sorted(kernel.host_memory_arg) == host_args


@needs_nccl_build
def test_alltoall_splits_stay_in_host_memory_on_a_gpu():
    (kernel,) = _gpu_kernels("TfringAlltoall")
    assert sorted(kernel.host_memory_arg) == ["received_splits", "splits"]

