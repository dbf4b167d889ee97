"""`python -m tfring.build` and `python tfring/build` (as a script: no TensorFlow import)."""

import sys

if __package__:
    from tfring.build.builder import main
else:
    from builder import main

sys.exit(main())
