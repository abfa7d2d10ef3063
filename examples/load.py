"""Load a checkpoint with a real loader's read pattern:
python examples/load.py --pattern NAME [--workers N] [--device cpu|cuda] PATH..."""

import sys

from readtrace.workloads.load import main

if __name__ == "__main__":
    sys.exit(main())
