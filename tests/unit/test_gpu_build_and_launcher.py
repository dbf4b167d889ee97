"""How the build finds (or refuses) the GPU toolchain, and tfringrun's --check-build and
exit status. The GPU build itself is exercised by every `make test` (the gpu extra is
installed); these pin down the decisions and messages around it."""

import io
import os
import subprocess
import sys

import pytest

from tfring import _library, build, launcher


def test_with_nccl_0_skips_the_gpu_path(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_NCCL", "0")
    toolchain, reason = build.find_gpu_toolchain()
    assert toolchain is None and reason == "TFRING_WITH_NCCL=0"


def test_bad_with_nccl_value_is_an_error(monkeypatch):
    monkeypatch.setenv("TFRING_WITH_NCCL", "maybe")
    with pytest.raises(build.BuildError, match="TFRING_WITH_NCCL must be 0, 1 or auto"):
        build.find_gpu_toolchain()


def test_nothing_found_auto_says_why_and_1_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "_package_dir", lambda name: None)
    monkeypatch.setattr(build, "_find", lambda roots, header, libs: None)
    monkeypatch.setenv("TFRING_WITH_NCCL", "auto")
    toolchain, reason = build.find_gpu_toolchain()
    assert toolchain is None
    assert "NCCL (nccl.h, libnccl.so.2)" in reason and "CUDA runtime" in reason
    monkeypatch.setenv("TFRING_WITH_NCCL", "1")
    with pytest.raises(build.BuildError, match=r"TFRING_WITH_NCCL=1 but .*pip install -e \.\[gpu\]"):
        build.find_gpu_toolchain()


def test_runtime_headers_without_crt_and_cccl_are_reported(monkeypatch, tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda_runtime_api.h").write_text("")
    monkeypatch.setattr(build, "_package_dir", lambda name: None)
    folders, lacking = build._cuda_header_folders(str(include))
    assert folders == [str(include)]
    assert any("crt/host_defines.h" in x and "nvidia-cuda-nvcc-cu12" in x for x in lacking)
    assert any("nv/target" in x and "nvidia-cuda-cccl-cu12" in x for x in lacking)
    (include / "crt").mkdir()
    (include / "crt" / "host_defines.h").write_text("")
    (include / "nv").mkdir()
    (include / "nv" / "target").write_text("")
    assert build._cuda_header_folders(str(include)) == ([str(include)], [])


def test_check_build_reports_tf_mpi_and_nccl():
    out = io.StringIO()
    assert launcher.check_build(out) == 0
    text = out.getvalue()
    info = _library.build_info()
    assert f"TensorFlow      {info['tensorflow']}" in text
    assert "Open MPI" in text
    assert ("NCCL (GPU ops)  built, NCCL " in text) == bool(info["nccl"])
    assert "not built" in text or info["nccl"]


def test_tfringrun_runs_mpirun_and_passes_the_exit_status():
    tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
    code = "import sys; sys.exit(7)"
    proc = subprocess.run([tfringrun, "-np", "2", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7, proc.stdout + proc.stderr
