"""tfring's build tooling, apart from the runtime modules: what builds the C++ library
(builder.py), what it builds with and where (toolchain.py), and the build at import
(on_import.py). `python -m tfring.build` runs builder.main; `python tfring/build
--native-only` runs it as a script, without TensorFlow. Nothing here imports tfring's
runtime modules."""
