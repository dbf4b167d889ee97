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
    assert _loaded_after("import tfring, tfring.elastic, tfring.gradient_tape") == []


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
