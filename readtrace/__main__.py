import sys

from readtrace.cli import main

sys.exit(main())
