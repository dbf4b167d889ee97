"""tfring's standard-library modules, loaded by path without importing tfring.

tfring itself is not imported by tfringrun: that would import TensorFlow, seconds of start-up
and a screen of logs for a launcher. tfring/build/toolchain.py (standard library only)
answers where the build is and which MPI it uses; it is loaded from tfring's folder by path,
so that tfring/__init__.py (which imports TensorFlow) does not run.
"""

import functools
import importlib.util
import os
import sys

REBUILD_COMMAND = "python -m tfring.build"


@functools.lru_cache(maxsize=None)
def tfring_module(name):
    """tfring's module `name` ("build.toolchain"), one of standard library only, loaded
    without importing the tfring package."""
    if f"tfring.{name}" in sys.modules:  # tfring is imported already (a test)
        return sys.modules[f"tfring.{name}"]
    spec = importlib.util.find_spec("tfring")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("tfringrun: tfring is not installed in this Python")
    path = os.path.join(list(spec.submodule_search_locations)[0], *name.split(".")) + ".py"
    module_spec = importlib.util.spec_from_file_location("_tfring_" + name.replace(".", "_"),
                                                         path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def toolchain():
    """tfring's build toolchain module (where the build is, which MPI it uses)."""
    return tfring_module("build.toolchain")
