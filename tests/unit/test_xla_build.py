"""How the build decides about the XLA lowerings (kernels/tf/xla): TFRING_WITH_XLA, a
TensorFlow without XLA's headers, and a lowering that fails to compile against this
TensorFlow (the library is then built without it, instead of not at all). The lowerings
themselves run in tests/parallel/test_xla.py."""

import os

import pytest

from tfring._process import library as _library
from tfring.build import builder, toolchain


def tensorflow_dir():
    return toolchain.tensorflow_dir()


def test_this_build_has_the_lowerings():
    info = _library.build_info()
    assert info["xla"] is True, info["xla_not_built_because"]


def test_the_flags_add_xla_include_folders_and_tensorflows_cc_library():
    (compile_flags, link_flags), reason = toolchain.find_xla_toolchain(tensorflow_dir())
    assert reason == ""
    assert any(f.endswith("external/highwayhash") for f in compile_flags)
    assert link_flags == ["-l:libtensorflow_cc.so.2"]


def test_with_xla_0_skips_them(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_XLA", "0")
    assert toolchain.find_xla_toolchain(tensorflow_dir()) == (None, "TFRING_WITH_XLA=0")


def test_bad_with_xla_value_is_an_error(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_XLA", "maybe")
    with pytest.raises(builder.BuildError, match="TFRING_WITH_XLA must be 0, 1 or auto"):
        toolchain.find_xla_toolchain(tensorflow_dir())


def test_missing_headers_say_which_and_1_fails(monkeypatch, tmp_path):
    (tmp_path / "include").mkdir()
    found, reason = toolchain.find_xla_toolchain(str(tmp_path))
    assert found is None
    assert "xla_op_kernel.h" in reason and "libtensorflow_cc.so.2" in reason
    monkeypatch.setenv("TFRING_WITH_XLA", "1")
    with pytest.raises(builder.BuildError, match="TFRING_WITH_XLA=1 but TensorFlow's wheel lacks"):
        toolchain.find_xla_toolchain(str(tmp_path))


def test_an_optional_source_that_fails_to_compile_is_returned_not_raised(tmp_path):
    bad = tmp_path / "bad.cc"
    bad.write_text("#error this TensorFlow moved a header\n")
    good = tmp_path / "good.cc"
    good.write_text("int tfring_good() { return 1; }\n")
    compiler = toolchain.plain_compiler(toolchain.find_mpicxx())
    jobs = [(compiler, ["-O0"], str(good)), (compiler, ["-O0"], str(bad))]
    objects, _ = builder.compile_all(str(tmp_path / "obj"), jobs, optional=[str(bad)])
    assert os.path.exists(objects[0])
    assert isinstance(objects[1], builder.BuildError)
    assert "this TensorFlow moved a header" in str(objects[1])
    with pytest.raises(builder.BuildError, match="this TensorFlow moved a header"):
        builder.compile_all(str(tmp_path / "obj2"), jobs)


def test_a_visible_gpu_keeps_tfring_out_of_xla_unless_asked(monkeypatch):
    import tensorflow as tf

    from tfring._ops import xla as _xla

    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["fake GPU"] if kind == "GPU" else [])
    _xla.why_unavailable.cache_clear()
    try:
        assert "GPU handler" in _xla.why_unavailable()
        assert not _xla.available()
        _xla.why_unavailable.cache_clear()
        monkeypatch.setenv("TFRING_XLA_GPU", "1")
        assert _xla.available()
    finally:
        _xla.why_unavailable.cache_clear()
