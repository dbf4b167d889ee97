import sys

from tfringrun.launcher import main

sys.exit(main())
