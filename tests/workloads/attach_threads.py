"""4 threads read one file through ONE fd opened before the recorder attaches: each reads the first
chunk of its quarter, then all wait for a go file (the test attaches meanwhile) and read the rest with
preads; then the process sleeps ``linger`` seconds (a server that keeps running after its load).

  args: DATA READY_FILE GO_FILE TRUTH_JSON [LINGER_S]
"""

import os
import sys
import threading
import time
from pathlib import Path

from _truth import write_truth

WORKERS = 4
CHUNK = 1 << 20


def main(data, ready, go, truth, linger=0.0):
    fd = os.open(data, os.O_RDONLY)
    size = os.fstat(fd).st_size
    part = size // WORKERS
    started = threading.Barrier(WORKERS + 1)
    tids = [0] * WORKERS

    def work(i):
        tids[i] = threading.get_native_id()
        offset, end = i * part, (i + 1) * part
        offset += len(os.pread(fd, CHUNK, offset))  # before the attach: not in the trace
        started.wait()
        while not Path(go).exists():
            time.sleep(0.01)
        while offset < end:
            offset += len(os.pread(fd, min(CHUNK, end - offset), offset))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    started.wait()
    write_truth(truth, fd=fd, tids=tids, part=part, chunk=CHUNK)
    Path(ready).touch()
    for t in threads:
        t.join()
    time.sleep(linger)


if __name__ == "__main__":
    main(*sys.argv[1:5], *map(float, sys.argv[5:6]))
