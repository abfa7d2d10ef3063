"""An mmap of a cold file (evicted with POSIX_FADV_DONTNEED) touched by two threads.

  thread A touches pages 0..15, thread B pages 8192..8207 (32 MiB further: beyond any read-around window;
  the file must be >= 64 MiB).
"""

import mmap
import os
import sys

from _truth import PAGE, write_truth

A_PAGES = range(0, 16)
B_PAGES = range(8192, 8208)


def touch(m, pages):
    return sum(m[p * PAGE] for p in pages)


def main(data, truth):
    import threading

    fd = os.open(data, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    tids = {}

    def worker(name, pages):
        tids[name] = threading.get_native_id()
        touch(m, pages)

    for name, pages in (("a", A_PAGES), ("b", B_PAGES)):
        t = threading.Thread(target=worker, args=(name, pages))
        t.start()
        t.join()
    m.close()
    os.close(fd)
    write_truth(truth, a_tid=tids["a"], b_tid=tids["b"], a_pages=[A_PAGES.start, A_PAGES.stop],
                b_pages=[B_PAGES.start, B_PAGES.stop])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
