"""preads at known offsets from the main thread and a second thread, on one shared fd; then a
second open of the same file (its own fd) read by the main thread.

  main:   pread 4 KiB at 0, 65536; then 4 consecutive 4 KiB preads from 131072 (merged: count 4)
  thread: pread 4 KiB at 16384, 98304
  fd2:    pread 8 KiB at 262144
"""

import os
import sys

from _truth import run_in_thread, write_truth

MAIN = [(0, 4096), (65536, 4096)]
RUN = [(131072 + i * 4096, 4096) for i in range(4)]
THREAD = [(16384, 4096), (98304, 4096)]
FD2 = [(262144, 8192)]


def preads(fd, reads):
    for offset, size in reads:
        assert len(os.pread(fd, size, offset)) == size


def main(data, truth):
    fd = os.open(data, os.O_RDONLY)
    preads(fd, MAIN)
    thread_tid = run_in_thread(preads, fd, THREAD)
    preads(fd, RUN)
    fd2 = os.open(data, os.O_RDONLY)
    preads(fd2, FD2)
    os.close(fd2)
    os.close(fd)
    write_truth(truth, fd=fd, fd2=fd2, thread_tid=thread_tid, main_reads=MAIN, run=RUN,
                thread_reads=THREAD, fd2_reads=FD2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
