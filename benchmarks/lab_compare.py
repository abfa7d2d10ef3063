"""fix --compare on the lab mount (gcsfuse profile, 20 ms first byte, keep_cache) for the issue's
done-when: 1 GiB checkpoint, example loader with 4 workers, baseline vs fixed, cold, interleaved.

    python benchmarks/lab_compare.py --size-mib 1024 --repeat 2 mmap-threads fork-shared-fd

Per run it also prints what the mount's request log saw (READs, small READs, backend streams) and,
as root, how many of the mount's pages the kernel dropped from the page cache during the run and by
which task (ftrace filemap:mm_filemap_delete_from_page_cache in a private tracing instance): the
evidence for proactive reclaim (kdamond) of prefetched pages. Results: JSON under bench-results/.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from readtrace.fix.compare import compare
from readtrace.fix.compare_report import render_table, to_json
from readtrace.simfs import mount
from readtrace.workloads import make_checkpoint

TRACING = Path("/sys/kernel/tracing/instances/readtrace_lab_compare")
DELETE = "events/filemap/mm_filemap_delete_from_page_cache"
DELETE_LINE = re.compile(r"^\s*(\S+)-\d+\s.*mm_filemap_delete_from_page_cache: .* ofs=(\d+)")


class PageCacheDeletions:
    """Page-cache deletions of one device's pages, by task name (root; else counts nothing)."""

    def __init__(self, dev_minor: int):
        self.ok = False
        try:
            TRACING.mkdir(exist_ok=True)
            (TRACING / "buffer_size_kb").write_text("65536")
            (TRACING / DELETE / "filter").write_text(f"s_dev == {dev_minor}")
            (TRACING / DELETE / "enable").write_text("1")
            self.ok = True
        except OSError:
            pass

    def take(self) -> dict[str, int]:
        if not self.ok:
            return {}
        lines = (TRACING / "trace").read_text().splitlines()
        (TRACING / "trace").write_text("")
        return dict(collections.Counter(m.group(1) for line in lines if (m := DELETE_LINE.match(line))))

    def close(self) -> None:
        if self.ok:
            (TRACING / DELETE / "enable").write_text("0")
            (TRACING / DELETE / "filter").write_text("0")
            TRACING.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("patterns", nargs="+")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--src", help="directory holding model.safetensors (made if missing)")
    ap.add_argument("--out", default=f"bench-results/lab_compare-{time.strftime('%Y%m%d-%H%M%S')}.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = Path(args.src or f"{tmp}/src")
        src.mkdir(exist_ok=True)
        if not (src / "model.safetensors").exists():
            make_checkpoint(src, args.size_mib)
        mnt = Path(tmp, "mnt")
        mnt.mkdir()
        path = str(mnt / "model.safetensors")
        out = {}
        with mount(src, mnt, profile="gcsfuse", latency_ms=args.latency_ms, keep_cache=True) as m:
            deletions = PageCacheDeletions(os.minor(os.stat(mnt).st_dev))
            try:
                for pattern in args.patterns:
                    runs = []

                    def log(line: str, runs=runs) -> None:
                        print(line, flush=True)
                        if line.startswith("run "):
                            if runs:
                                runs[-1].update(_reads(m, runs[-1].pop("first")), dropped_by=deletions.take())
                            runs.append({"side": line.split()[2], "first": len(m.requests())})
                            deletions.take()

                    cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern,
                           "--workers", str(args.workers), path]
                    result = compare(cmd, strategy="both", repeat=args.repeat, files=[path], log=log)
                    runs[-1].update(_reads(m, runs[-1].pop("first")), dropped_by=deletions.take())
                    print(pattern)
                    render_table(result, sys.stdout)
                    for run in runs:
                        print("  ", json.dumps(run))
                    out[pattern] = {"compare": to_json(result), "runs": runs}
            finally:
                deletions.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("saved", args.out)
    return 0


def _reads(m, first: int) -> dict:
    reads = m.requests().iloc[first:]
    small = reads[reads["size"] < (128 << 10)]
    return {"fuse_reads": len(reads), "small_reads": len(small), "small_bytes": int(small["size"].sum()),
            "backend_streams": int(reads["new_request"].sum())}


if __name__ == "__main__":
    sys.exit(main())
