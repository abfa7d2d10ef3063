"""A raw loader: one mmap of the file, WORKERS threads (default 4) each touching every page of its
quarter, all faulting through the one open file (no tensors: fix --compare digests the mapped bytes).

    raw_mmap_threads.py FILE [DIGESTS] [--workers N]

DIGESTS: append one digest of the mapped bytes (as "1 tensor"), taken after the threads are done."""

import argparse
import hashlib
import mmap
import threading

parser = argparse.ArgumentParser()
parser.add_argument("file")
parser.add_argument("digests", nargs="?")
parser.add_argument("--workers", type=int, default=4)
args = parser.parse_args()
with open(args.file, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
size = len(m)
part = -(-size // args.workers)


def work(i):
    return sum(m[pos] for pos in range(i * part, min(size, (i + 1) * part), 4096))


threads = [threading.Thread(target=work, args=(i,)) for i in range(args.workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if args.digests:
    from _digest import combine

    combine("raw_mmap_threads", {"mapped bytes": hashlib.sha256(m).digest()}, args.digests)
m.close()
