"""tfringrun: the launcher for tfring jobs (see launcher.py). Imports no TensorFlow."""
