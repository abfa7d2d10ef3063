"""Write a deterministic safetensors checkpoint: python examples/make_checkpoint.py OUT --size-mib N [--shards K]"""

import sys

from readtrace.workloads.checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
