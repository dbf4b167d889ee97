"""The layers hold: `import tfring` (the collectives, TF1, the tape) loads nothing of
tfring.keras, which Horovod's names in `tfring` (SyncBatchNormalization) load at first use,
and the library never imports the launcher (tfringrun), whose contract with it is the
environment."""

import os
import subprocess
import sys

TFRING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tfring")


def _loaded_after(code):
    probe = (f"import sys\n{code}\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tfringrun' or "
             "m.startswith('tfring.keras')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_import_tfring_loads_no_keras_layer_and_no_launcher():
    assert _loaded_after("import tfring, tfring.elastic, tfring._training.gradient_tape") == []


def test_horovods_keras_names_in_tfring_load_it_at_first_use():
    loaded = _loaded_after("import tfring\nlayer = tfring.SyncBatchNormalization()")
    assert "tfring.keras.sync_batch_norm" in loaded
    assert not [m for m in loaded if m.startswith("tfringrun")]


def test_no_library_module_imports_the_launcher():
    found = []
    for folder, _, files in os.walk(TFRING):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    found += [f"{name}: {line.strip()}" for line in f
                              if line.lstrip().startswith(("import tfringrun", "from tfringrun"))]
    assert not found, found


# The Python layer's floors, lowest first (docs/architecture.md, 'The Python layer'): a
# module imports tfring modules of its own floor or of those below, at module level and
# inside functions alike. A module's floor is that of the longest name listed that holds it.
FLOORS = [
    ("names and no code of tfring's", ["tfring._adapters", "tfring.common", "tfring.build",
                                       "tfring._elastic.environment", "tfring.compression",
                                       "tfring.timeline", "tfring.flight_recorder"]),
    # members.py and process_end.py sit here, not with the rest of elastic: init() joins a
    # growing job through the first, and the runtime's exit goes through the second.
    ("the process", ["tfring._process", "tfring._elastic.members",
                     "tfring._elastic.process_end"]),
    ("the collectives", ["tfring._ops", "tfring.collectives", "tfring.functions"]),
    ("init", ["tfring._init"]),
    ("training with TensorFlow", ["tfring._training", "tfring.gradient_aggregation"]),
    ("elastic", ["tfring._elastic", "tfring.elastic"]),
    ("Keras", ["tfring.keras"]),
    ("Horovod's names", ["tfring"]),
]
# Where Horovod's API puts a Keras object below tfring.keras: loaded at first use.
AT_FIRST_USE = {("tfring", "tfring.keras.sync_batch_norm"),
                ("tfring._training.optimizer_v1", "tfring.keras.optimizer")}


def _floor(module):
    best = max((name for _, names in FLOORS for name in names
                if module == name or module.startswith(name + ".")), key=len)
    return next(i for i, (_, names) in enumerate(FLOORS) if best in names)


def _tfring_imports(path, package):
    """(imported module, whether at module level) for each tfring import in `path`."""
    import ast

    with open(path) as f:
        tree = ast.parse(f.read())
    top = set(map(id, tree.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from tfring._ops import naming` imports tfring._ops.naming.
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in package
                     else node.module for a in node.names]
        else:
            continue
        found += [(n, id(node) in top) for n in names if n.split(".")[0] == "tfring"]
    return found


def _library_modules():
    modules = {}
    root = os.path.dirname(os.path.abspath(TFRING))
    for folder, _, files in os.walk(TFRING):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                modules[dotted[:-len(".__init__")] if dotted.endswith(".__init__")
                        else dotted] = path
    return modules


def test_each_module_imports_only_its_floor_and_those_below():
    modules = _library_modules()
    wrong = []
    for module, path in sorted(modules.items()):
        for imported, _ in _tfring_imports(path, modules):
            if (module, imported) in AT_FIRST_USE:
                continue
            if _floor(imported) > _floor(module):
                wrong.append(f"{module} ({FLOORS[_floor(module)][0]}) imports {imported} "
                             f"({FLOORS[_floor(imported)][0]})")
    assert not wrong, "\n".join(wrong)


def test_the_keras_objects_below_keras_are_loaded_at_first_use():
    modules = _library_modules()
    for module, imported in AT_FIRST_USE:
        assert (imported, False) in _tfring_imports(modules[module], modules), \
            f"{module} no longer imports {imported} inside a function"


def test_private_packages_import_nothing_when_imported():
    # Their __init__ says what the package owns and may import, and imports nothing, so
    # that importing one of its modules loads no other (no hidden floor).
    for package in ("_process", "_ops", "_training", "_elastic", "_adapters"):
        with open(os.path.join(TFRING, package, "__init__.py")) as f:
            text = f.read()
        assert "import " not in text.split('"""')[-1], package
