"""A raw loader: one mmap of the file, WORKERS threads (default 4) each touching every page of its
quarter, all faulting through the one open file (no tensors: fix --compare digests the mapped bytes)."""

import mmap
import sys
import threading

workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
size = len(m)
part = -(-size // workers)


def work(i):
    return sum(m[pos] for pos in range(i * part, min(size, (i + 1) * part), 4096))


threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
m.close()
