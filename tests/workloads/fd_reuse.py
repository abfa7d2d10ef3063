"""An fd number that comes to name another file between two reads of one thread (the probes cache
fd -> struct file per thread; each change must be seen). Offsets continue across every change, so a
stale cached file would also merge the read into the previous file's run.

  main:   pread(fd, A, 0), pread(fd, A, 4096); close(fd); open B -> fd; pread(fd, B, 8192)
          open C -> c; dup2(c, fd); pread(fd, C, 12288)
  thread: pread(fd, C, 16384); main: close(fd); open A -> fd; thread: pread(fd, A, 20480)
  main:   pread(fd, A, 24576); closerange(fd, fd + 1) (close_range(2)); open B -> fd; pread(fd, B, 28672)
"""

import os
import sys
import threading

from _truth import PAGE, write_truth


def main(a, b, c, truth):
    reads = []  # [path, tid, offset]

    def pread(fd, path, offset):
        os.pread(fd, PAGE, offset)
        reads.append([path, threading.get_native_id(), offset])

    fd = os.open(a, os.O_RDONLY)
    pread(fd, a, 0)
    pread(fd, a, PAGE)
    os.close(fd)
    assert os.open(b, os.O_RDONLY) == fd
    pread(fd, b, 2 * PAGE)
    fd_c = os.open(c, os.O_RDONLY)
    os.dup2(fd_c, fd)
    pread(fd, c, 3 * PAGE)

    changed, read_once = threading.Event(), threading.Event()

    def reader():
        pread(fd, c, 4 * PAGE)
        read_once.set()
        changed.wait()
        pread(fd, a, 5 * PAGE)

    thread = threading.Thread(target=reader)
    thread.start()
    read_once.wait()
    os.close(fd)
    assert os.open(a, os.O_RDONLY) == fd
    changed.set()
    thread.join()

    pread(fd, a, 6 * PAGE)
    os.closerange(fd, fd + 1)
    assert os.open(b, os.O_RDONLY) == fd
    pread(fd, b, 7 * PAGE)
    os.close(fd)
    os.close(fd_c)
    write_truth(truth, fd=fd, reads=reads)


if __name__ == "__main__":
    main(*sys.argv[1:])
