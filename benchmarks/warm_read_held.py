"""Is a warm run warm? The floor's warm run (fix/session.py) reads files that were read into the page
cache just before; proactive reclaim (this VM's DAMON pageout, readtrace/pagecache/reclaim.py) may take
some in between. Side by side, per trial: the file prefetched without and with pins, an idle wait (an
interpreter's imports), then a read through a private mapping (safetensors' access): FUSE READs the
lab mount served (gcsfuse profile, keep_cache) and the read's seconds, and what reclaimed page cache
meanwhile (the recorder's own counters). A table and JSON.

    python benchmarks/warm_read_held.py --size-mib 256 --trials 12 --idle-s 5 --out bench-results/warm-held.json
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import tempfile
import time
from pathlib import Path

from readtrace.pagecache.evict import evict
from readtrace.pagecache.prefetch import prefetch
from readtrace.pagecache.reclaim import Watch, explain
from readtrace.simfs import force_unmount, mount

MiB = 1 << 20


def warm_read(m, path: str, pin: bool, idle_s: float) -> dict:
    evict([path])
    fetched = prefetch([path], progress=False, pin=pin)
    watch = Watch()
    try:
        time.sleep(idle_s)
        before, started = len(m.requests()), time.perf_counter()
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
            sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
        read_s = time.perf_counter() - started
    finally:
        if fetched.pins is not None:
            fetched.pins.release()
    reads = m.requests().iloc[before:]
    return {"pinned": fetched.pinned_bytes > 0, "fuse_reads": len(reads), "fuse_mib": float(reads["size"].sum()) / MiB,
            "read_s": round(read_s, 3), "eviction": explain(watch.stop())[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--out", default="bench-results/warm-held.json")
    args = ap.parse_args()
    load = os.getloadavg()
    base = Path(tempfile.mkdtemp(dir="/var/tmp"))
    src, mnt = base / "src", base / "mnt"
    src.mkdir()
    mnt.mkdir()
    with open(src / "w.bin", "wb") as f:
        for _ in range(args.size_mib):
            f.write(os.urandom(MiB))
    rows = []
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=args.latency_ms, keep_cache=True) as m:
            for trial in range(args.trials):
                for pin in (False, True):  # side by side, the same minute
                    row = {"trial": trial, **warm_read(m, str(mnt / "w.bin"), pin, args.idle_s)}
                    rows.append(row)
                    print(f"{trial:>5}  {'pinned' if row['pinned'] else 'not pinned':<10}  {row['fuse_reads']:>4} READs  "
                          f"{row['fuse_mib']:7.1f} MiB  {row['read_s']:6.2f} s", flush=True)
    finally:
        force_unmount(mnt)
        (src / "w.bin").unlink(missing_ok=True)
    for pinned in (False, True):
        mine = [r for r in rows if r["pinned"] == pinned]
        lost = [r for r in mine if r["fuse_reads"]]
        print(f"{'pinned' if pinned else 'not pinned'}: {len(lost)} of {len(mine)} warm reads went to the mount; "
              f"read {min(r['read_s'] for r in mine):.2f}-{max(r['read_s'] for r in mine):.2f} s")
    out = {"size_mib": args.size_mib, "idle_s": args.idle_s, "latency_ms": args.latency_ms, "cpus": os.cpu_count(),
           "loadavg_before": load, "loadavg_after": os.getloadavg(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f}; JSON: {args.out}")


if __name__ == "__main__":
    main()
