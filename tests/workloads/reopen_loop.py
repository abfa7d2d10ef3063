"""Opens, one pread and a close, over and over for SECONDS, cycling through three files: the kernel
gives each open the struct file the previous close freed (one address naming a, b, c, a, ...), the
decoder's history of what each address named grows by one row per open.

  reopen_loop.py A B C TRUTH SECONDS    -> TRUTH: {"reads": [[path, tid, offset], ...]}
"""

import os
import sys
import threading
import time

from _truth import PAGE, write_truth


def main(a, b, c, truth, seconds):
    files, reads, until, i = (a, b, c), [], time.monotonic() + float(seconds), 0
    tid = threading.get_native_id()
    while time.monotonic() < until:
        path = files[i % 3]
        offset = (2 * i % 64) * PAGE  # never the end of the previous read: no run merges across files
        fd = os.open(path, os.O_RDONLY)
        os.pread(fd, PAGE, offset)
        os.close(fd)
        reads.append([path, tid, offset])
        i += 1
        time.sleep(0.001)
    write_truth(truth, reads=reads)


if __name__ == "__main__":
    main(*sys.argv[1:])
