"""Bursts of 4 KiB preads at descending offsets (nothing merges), with pauses between bursts.

  BURSTS bursts of CALLS preads each, 30 ms apart: a small ring wraps many times without ever
  being full, so the trace must hold every call: BURSTS * CALLS preads.
"""

import os
import sys
import time

from _truth import PAGE, write_truth

BURSTS, CALLS = 40, 2000


def main(data, truth):
    fd = os.open(data, os.O_RDONLY)
    pages = os.fstat(fd).st_size // PAGE
    for burst in range(BURSTS):
        for i in range(CALLS):
            os.pread(fd, PAGE, ((pages - 1 - i - burst) % pages) * PAGE)
        time.sleep(0.03)
    os.close(fd)
    write_truth(truth, calls=BURSTS * CALLS)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
