"""`import tfring` builds the library when it is missing or stale, once per environment.

Each test points TFRING_CACHE_DIR at a fresh folder, so it builds (or fails to build) there
and leaves the suite's own build alone.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading

import pytest

from tfring.build import builder, on_import, toolchain

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
SUM_OF_ONES = (
    "import tfring, tensorflow as tf\n"
    "tfring.init()\n"
    "total = tfring.allreduce(tf.constant(1.0), op=tfring.Sum)\n"
    "print(f'rank {tfring.rank()}: sum {float(total)}', flush=True)\n")


# A broken MPI wrapper that names itself as the compiler behind it, so that every compile
# fails, the first at once (else the sources compiled without MPI's wrapper would build
# first, for tens of seconds, before the first failure).
NAMES_ITSELF = 'if [ "$1" = --showme:command ]; then echo "$0"; exit 0; fi\n'


def _run(argv, cache, timeout, **env):
    return subprocess.run(argv, env=dict(ENV, TFRING_CACHE_DIR=str(cache), **env),
                          capture_output=True, text=True, timeout=timeout)


def _objects_of_the_suites_build(cache):
    """Puts the suite's compiled objects where a build into `cache` looks for them, so that
    the build there only links the library. Compiling all of tfring takes minutes on two
    cores; the test is about the lock, which the link holds (_link_waits_for_every_rank
    makes it hold it until every rank waits). (Elsewhere, as from an installed package, the
    build compiles everything.)"""
    own = os.path.join(toolchain.entry_dir(), "obj")
    if os.path.isdir(own):
        shutil.copytree(own, cache / os.path.basename(toolchain.entry_dir()) / "obj")


# The linker gcc runs for the library's link (`-B` puts this one first): it waits until
# `ranks` processes have the build lock open (the builder, which holds it, and every other
# rank, each waiting for it: a process opens it only to take it), notes how many it saw, and
# runs the real linker. Any other link passes straight through.
LINK_HOOK = """#!{python}
import os, sys, time
args = sys.argv[1:]
if "-o" in args and "libtfring.so" in os.path.basename(args[args.index("-o") + 1]):
    def openers():
        pids = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                for fd in os.listdir(f"/proc/{{pid}}/fd"):
                    if os.readlink(f"/proc/{{pid}}/fd/{{fd}}") == {lock!r}:
                        pids.add(pid)
            except OSError:
                pass
        return pids
    deadline = time.monotonic() + 300
    while len(openers()) < {ranks} and time.monotonic() < deadline:
        time.sleep(0.1)
    with open({note!r}, "w") as f:
        f.write(str(len(openers())))
os.execv({ld!r}, [{ld!r}] + args)
"""


def _link_waits_for_every_rank(tmp_path, cache, ranks):
    """The environment that makes the library's link wait for `ranks` processes to have the
    build lock open (LINK_HOOK), and the file where the hook notes how many it saw. Open
    MPI's wrapper takes the link's flags from OMPI_LDFLAGS, in place of its own (so they are
    repeated there, after -B), and -B makes gcc look for `ld` in the hook's folder first.
    Compiles are not links: the objects, and where the build goes, stay as they were."""
    hook_dir, note = tmp_path / "hook", tmp_path / "openers"
    hook_dir.mkdir()
    lock = os.path.realpath(cache / os.path.basename(toolchain.entry_dir()) / "build.lock")
    hook, ld = hook_dir / "ld", shutil.which("ld")
    assert ld, "no ld on PATH for the link hook to run"
    hook.write_text(LINK_HOOK.format(python=sys.executable, lock=lock, ranks=ranks,
                                     note=str(note), ld=ld))
    hook.chmod(0o755)
    link = subprocess.run([builder.find_mpicxx(), "--showme:link"], capture_output=True,
                          text=True, check=True).stdout.split()
    flags = [f"-B{hook_dir}/"] + [f for f in link if not f.startswith("-l")]
    return {"OMPI_LDFLAGS": " ".join(flags)}, note


def test_four_ranks_importing_an_unbuilt_tfring_build_it_once(tmp_path):
    cache = tmp_path / "cache"
    _objects_of_the_suites_build(cache)
    hook_env, note = _link_waits_for_every_rank(tmp_path, cache, ranks=4)
    mpirun = [os.path.join(BIN, "mpirun"), "--oversubscribe", "-np", "4"]
    proc = _run(mpirun + [sys.executable, "-c", SUM_OF_ONES], cache, timeout=600, **hook_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count("tfring: building its C++ library") == 1, out[-4000:]
    assert out.count("tfring: built ") == 1, out[-4000:]
    # The link waited until all four had the lock open: the builder and three waiters, who
    # said so and then loaded what it built (no timing decides it).
    assert note.exists(), "the library's link did not run through the link hook"
    assert note.read_text() == "4", "the link hook did not see every rank at the lock"
    assert out.count("tfring: waiting for process") == 3, out[-4000:]
    assert sorted(line for line in out.splitlines() if ": sum " in line) == \
        sorted(f"rank {r}: sum 4.0" for r in range(4))
    (entry,) = [p for p in cache.iterdir() if p.is_dir()]
    record = json.loads((entry / "build_info.json").read_text())
    assert record["sources"] == toolchain.source_digest()
    assert (entry / "libtfring.so").exists()
    # Built: the next import loads it without building.
    again = _run([sys.executable, "-c", "import tfring"], cache, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "tfring: build" not in again.stdout + again.stderr


def test_a_failed_build_prints_the_compiler_error_and_build_md_advice(tmp_path):
    broken = tmp_path / "mpicxx"
    broken.write_text(f"#!/bin/sh\n{NAMES_ITSELF}"
                      "echo 'fake.cc:1:1: error: this compiler is broken' >&2\nexit 1\n")
    broken.chmod(0o755)
    proc = _run([sys.executable, "-c", "import tfring"], tmp_path / "cache", timeout=300,
                TFRING_MPICXX=str(broken))
    assert proc.returncode != 0
    err = proc.stderr
    assert "ImportError: tfring's C++ library could not be built" in err
    assert "error: this compiler is broken" in err
    assert "From tfring's BUILD.md, 'When the build fails':" in err
    assert "| what you see | why | what to do |" in err  # the section's table itself
    (failure,) = (tmp_path / "cache").glob("*/build_failed.json")
    assert "this compiler is broken" in json.loads(failure.read_text())["error"]


def test_processes_that_waited_on_a_failed_build_fail_with_its_error(tmp_path):
    # A compiler that takes a while to fail, so the second process surely waits for it.
    broken = tmp_path / "mpicxx"
    marker = tmp_path / "slept"
    broken.write_text(f"#!/bin/sh\n{NAMES_ITSELF}"
                      f"if [ ! -e {marker} ]; then touch {marker}; sleep 4; fi\n"
                      "echo 'fake.cc:1:1: error: this compiler is broken' >&2\nexit 1\n")
    broken.chmod(0o755)
    env = dict(ENV, TFRING_CACHE_DIR=str(tmp_path / "cache"), TFRING_MPICXX=str(broken))
    procs = [subprocess.Popen([sys.executable, "-c", "import tfring"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode != 0 for p in procs)
    assert sum(e.count("tfring: building its C++ library") for e in errs) == 1, errs
    assert all("error: this compiler is broken" in e for e in errs), errs
    waited = "library could not be built: another process building the same library failed"
    assert sum(waited in e for e in errs) == 1, errs


def test_build_on_import_off_names_the_command(tmp_path):
    proc = _run([sys.executable, "-c", "import tfring"], tmp_path / "cache", timeout=300,
                TFRING_BUILD_ON_IMPORT="0")
    assert proc.returncode != 0
    assert "it is not built yet. Build it with: python -m tfring.build" in proc.stderr


def _fake_entry(tmp_path, **record):
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "libtfring.so").write_text("")
    (entry / "build_info.json").write_text(json.dumps(record))
    return str(entry)


def test_changed_sources_or_tensorflow_make_the_library_stale(tmp_path):
    entry = _fake_entry(tmp_path, sources=toolchain.source_digest(), tensorflow="2.21.0")
    assert toolchain.stale_reason(entry, "2.21.0") == ""
    assert "built for TensorFlow 2.21.0, and TensorFlow 2.19.1 is installed" in \
        toolchain.stale_reason(entry, "2.19.1")
    record = json.loads(open(os.path.join(entry, "build_info.json")).read())
    record["sources"] = "another digest"
    open(os.path.join(entry, "build_info.json"), "w").write(json.dumps(record))
    assert "sources changed" in toolchain.stale_reason(entry, "2.21.0")
    os.remove(os.path.join(entry, "libtfring.so"))
    assert "not built yet" in toolchain.stale_reason(entry, "2.21.0")


def test_another_tensorflow_mpi_or_nccl_setting_is_another_entry(monkeypatch, tmp_path):
    fake_tf = tmp_path / "tensorflow"
    fake_tf.mkdir()
    framework = fake_tf / "libtensorflow_framework.so.2"
    framework.write_text("one build of TensorFlow")
    mpicxx = tmp_path / "mpicxx"
    mpicxx.write_text("#!/bin/sh\n")
    mpicxx.chmod(0o755)
    monkeypatch.setattr(toolchain, "tensorflow_dir", lambda: str(fake_tf))
    monkeypatch.setenv("TFRING_MPICXX", str(mpicxx))
    base = toolchain.entry_dir()
    assert os.path.basename(base).startswith(f"tf{toolchain.tensorflow_distribution()[1]}-")
    assert toolchain.entry_dir() == base  # nothing changed: the same folder
    framework.write_text("TensorFlow reinstalled, another version")
    after_tf = toolchain.entry_dir()
    assert after_tf != base
    mpicxx.write_text("#!/bin/sh\n# another MPI\n")
    after_mpi = toolchain.entry_dir()
    assert after_mpi not in (base, after_tf)
    monkeypatch.setenv("TFRING_WITH_NCCL", "0")
    assert toolchain.entry_dir() not in (base, after_tf, after_mpi)


def test_cache_root_setting_and_checkout_default(monkeypatch, tmp_path):
    monkeypatch.setenv("TFRING_CACHE_DIR", str(tmp_path))
    assert toolchain.cache_root() == str(tmp_path)
    monkeypatch.delenv("TFRING_CACHE_DIR")
    assert toolchain.is_checkout()  # the suite runs from the source tree
    assert toolchain.cache_root() == os.path.join(toolchain.ROOT, "build")
    monkeypatch.setattr(toolchain, "is_checkout", lambda: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert toolchain.cache_root() == str(tmp_path / "xdg" / "tfring")


def test_a_lock_held_too_long_is_an_error_naming_its_holder(monkeypatch, tmp_path):
    monkeypatch.setenv("TFRING_BUILD_WAIT_SECONDS", "0.5")
    said = []
    with builder.EntryLock(str(tmp_path)):
        with pytest.raises(builder.BuildError, match=rf"process {os.getpid()} has held the build "
                                                   r"lock .* for more than 0.5 s"):
            with builder.EntryLock(str(tmp_path), say=said.append):
                pass
    assert said and f"waiting for process {os.getpid()}" in said[0]


def test_a_waiter_gets_the_lock_when_the_builder_is_done(tmp_path):
    order = []
    holder = builder.EntryLock(str(tmp_path))
    holder.__enter__()

    def wait():
        with builder.EntryLock(str(tmp_path), say=lambda text: order.append("waiting")):
            order.append("acquired")

    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(1.0)
    assert order == ["waiting"]
    order.append("released")
    holder.__exit__(None, None, None)
    waiter.join(10)
    assert order == ["waiting", "released", "acquired"]


def test_a_waiter_fails_with_the_error_of_the_build_it_waited_for(tmp_path):
    builder.write_json(str(tmp_path / on_import.FAILURE_NAME),
                     {"error": "boom", "section": "GPU (NCCL)", "time": 100.0})
    on_import._raise_if_failed_while_waiting(str(tmp_path), waited_since=200.0)  # an old one
    with pytest.raises(builder.BuildError, match="(?s)building the same library failed.*boom"):
        on_import._raise_if_failed_while_waiting(str(tmp_path), waited_since=50.0)


def test_build_md_sections_are_found_for_every_error():
    for section in ("When the build fails", "What it does", "GPU (NCCL)"):
        assert len(on_import.build_doc_section(section)) > 200, section
    assert on_import.build_doc_section("No such section") == ""


def test_the_sdist_carries_the_sources_and_build_md(tmp_path):
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=toolchain.ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = proc.stdout.split()[-1]
    with tarfile.open(tmp_path / name) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
        (build_md,) = [m for m in tar.getmembers() if m.name.endswith("/tfring/BUILD.md")]
        assert build_md.isfile()  # the link in the checkout becomes the file itself
        text = tar.extractfile(build_md).read().decode()
    assert text == open(os.path.join(toolchain.ROOT, "BUILD.md")).read()
    for folder, _, files in os.walk(toolchain.KERNELS):
        for f in files:
            if f.endswith((".cc", ".h")):
                rel = os.path.relpath(os.path.join(folder, f), toolchain.ROOT)
                assert rel in members, rel
    assert "tfring/build/toolchain.py" in members


def test_an_installed_tfring_without_the_checkouts_tests_builds(monkeypatch, tmp_path):
    # Installed (pip install of the sdist), tfring's folder sits in site-packages with no
    # tests/ beside it: the library's build must not look for the native tests (it did, and
    # every `import tfring` from an sdist failed, since 20cd79b). The build runs as it would
    # there, its compiles and links stood in for (a real one takes minutes: make compat
    # builds from an sdist).
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(builder, "ROOT", str(site))
    compiled = []

    def compile_one(obj_dir, compiler, flags, source):
        compiled.append(source)
        return builder.object_path(obj_dir, source), False

    monkeypatch.setattr(builder, "compile_one", compile_one)
    monkeypatch.setattr(builder, "link", lambda compiler, objects, out, extra: False)
    monkeypatch.setattr(builder, "write_json", lambda path, value: None)
    record = builder.build(entry=str(tmp_path / "entry"), say=lambda *args: None)
    assert record["library"] == str(tmp_path / "entry" / toolchain.LIBRARY_NAME)
    assert compiled and not [s for s in compiled if os.sep + "tests" + os.sep in s]
