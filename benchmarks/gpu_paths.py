"""Benchmark: where a warm load onto the GPU spends its time, one way of moving the bytes at a time.

On one checkpoint already in the page cache, side by side in one run (median of --repeat):
- the limit: one pinned host-to-device copy of the same bytes (and the same in 16 MiB pieces);
- the host side alone: N threads pread-ing the file into pinned buffers (no GPU);
- registration alone: cudaHostRegister + cudaHostUnregister of the cached pages, N threads;
- a pageable copy: the file's mapping copied with one ``.to("cuda")``;
- readtrace's cached copy: readers sharing units, some from registered page-cache pages, the rest
  through staging buffers, by readers, registering readers and unit size; the loader with its
  defaults and with staging only; safetensors ``load_file(device="cuda")`` for context.

    python benchmarks/gpu_paths.py --size-mib 2048 --out gpu_paths.json

Issue 29's target: readtrace's warm load >= 0.8 x the pinned copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load_file as st_load_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_loader import machine, make_checkpoint  # noqa: E402
from readtrace.loader.devicecopy import ReadOnlyMapping, copy_cached, register_chunks, wait_unpinned  # noqa: E402
from readtrace.loader.fileio import open_fd, read_into, tensor_bytes  # noqa: E402
from readtrace.loader.loader import load_file  # noqa: E402
from readtrace.loader.spans import split_spans  # noqa: E402
from readtrace.pagecache.prefetch import prefetch  # noqa: E402

MiB = 1 << 20


def timed(run: Callable[[], object], repeat: int, path: str) -> float:
    """Median seconds of ``run`` with the file cached and the GPU idle before each."""
    times = []
    for _ in range(repeat):
        prefetch([path], progress=False)
        wait_unpinned()
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def in_threads(path: str, threads: int, work: Callable[[int, int, int], None]) -> Callable[[], None]:
    """Each of ``threads`` workers runs ``work(fd, start, end)`` on its own fd and share of the file."""
    size = os.path.getsize(path)

    def run():
        def one(span):
            with open_fd(path) as fd:
                work(fd, *span)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, split_spans(size, threads)))
    return run


def pread_only(chunk: int) -> Callable[[int, int, int], None]:
    buffers: dict[int, torch.Tensor] = {}

    def work(fd, start, end):
        buf = buffers.setdefault(start, torch.empty(chunk, dtype=torch.uint8, pin_memory=True))
        view = tensor_bytes(buf)
        for pos in range(start, end, chunk):
            read_into(fd, view[:min(chunk, end - pos)], pos, chunk_bytes=chunk)
    return work


def register_only(chunk: int, unregister: bool = True) -> Callable[[int, int, int], None]:
    """Register each chunk's pages (and unregister them at once, or after the timing: ``unregister``)."""
    cudart = torch.cuda.cudart()

    def work(fd, start, end):
        mapping = ReadOnlyMapping(fd, start, end)
        pages = []
        for a, b in register_chunks(start, end - start, chunk):
            page, n = mapping.pages(a, b)
            assert int(cudart.cudaHostRegister(page, n, 8)) == 0, "cudaHostRegister refused"
            if unregister:
                cudart.cudaHostUnregister(page)
            else:
                pages.append(page)
        LATER.append((mapping, pages))
    return work


LATER: list = []  # (mapping, registered pages) let go after a timing


def let_go() -> None:
    cudart = torch.cuda.cudart()
    while LATER:
        mapping, pages = LATER.pop()
        for page in pages:
            cudart.cudaHostUnregister(page)
        mapping.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=2048)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="bench-results/gpu_paths.json")
    p.add_argument("--groups", nargs="+", help="only these groups (limit host register pageable cached loader peer)")
    p.add_argument("--checkpoint", help="an existing checkpoint to read (never written) instead of making one")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_paths: needs a CUDA GPU", file=sys.stderr)
        return 3
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="gpu-paths-") as tmp:
        path = args.checkpoint or os.path.join(tmp, "model.safetensors")
        if not args.checkpoint:
            make_checkpoint(path, args.size_mib * MiB)
        size = os.path.getsize(path)
        buf = {"src": torch.empty(size, dtype=torch.uint8, pin_memory=True),
               "dst": torch.empty(size, dtype=torch.uint8, device="cuda")}

        def add(group: str, name: str, run: Callable[[], object]) -> None:
            if args.groups and group not in args.groups and group != "limit":
                return
            try:
                s = timed(run, args.repeat, path)
                rows.append({"group": group, "way": name, "s": s, "gbps": size / s / 1e9})
            except Exception as e:  # noqa: BLE001 - a way that fails here is a result
                rows.append({"group": group, "way": name, "error": f"{type(e).__name__}: {e}"})
            let_go()
            print(f"  {group:10} {name:56} {rows[-1].get('s', float('nan')):.3f} s", flush=True)

        add("limit", "pinned H2D, one copy", lambda: buf["dst"].copy_(buf["src"], non_blocking=True))

        def pieces():
            for pos in range(0, size, 16 * MiB):
                buf["dst"][pos:pos + 16 * MiB].copy_(buf["src"][pos:pos + 16 * MiB], non_blocking=True)
        add("limit", "pinned H2D, 16 MiB pieces", pieces)
        for t in (1, 4, 8, 16):
            add("host", f"pread into pinned, {t} threads", in_threads(path, t, pread_only(16 * MiB)))
        for t, chunk in ((1, 64), (4, 64), (1, 256)):
            add("register", f"register+unregister, {t} threads, {chunk} MiB", in_threads(path, t, register_only(chunk * MiB)))
        for t, chunk in ((1, 64), (2, 64), (1, 256)):
            add("register", f"register only, {t} threads, {chunk} MiB",
                in_threads(path, t, register_only(chunk * MiB, unregister=False)))

        def pageable():
            with open_fd(path) as fd:
                mapping = ReadOnlyMapping(fd, 0, size)
                try:
                    buf["dst"].copy_(mapping.view(0, size))
                finally:
                    mapping.close()
        add("pageable", "mapping.to(cuda), one copy", pageable)

        def cached(readers: int, registering: int, unit_mib: int, chunk_mib: int = 16):
            with open(path, "rb") as f:
                offset = 8 + int.from_bytes(f.read(8), "little")  # the data section's start
            dest = buf["dst"][:size - offset]
            return lambda: copy_cached(path, offset, dest, readers=readers, registering=registering,
                                       chunk_bytes=chunk_mib * MiB, unit_bytes=unit_mib * MiB)
        for readers, registering, unit in ((16, 0, 64), (16, 1, 64), (16, 2, 64), (1, 1, 64), (1, 1, 256),
                                           (2, 2, 128), (2, 2, 256), (2, 2, 512), (4, 4, 256), (16, 2, 256)):
            add("cached", f"{readers} readers, {registering} registering, {unit} MiB units",
                cached(readers, registering, unit))
        buf.clear()  # the loads below allocate their own
        for t in (4, 8, 16):
            add("loader", f"own-fd x{t}", lambda t=t: load_file(path, "cuda", threads=t))
        add("loader", "own-fd x16, registered pages", lambda: load_file(path, "cuda", threads=16, register_cached=True))
        add("loader", "own-fd, defaults", lambda: load_file(path, "cuda"))
        add("peer", "safetensors load_file(device=cuda)", lambda: st_load_file(path, device="cuda"))
    limit = next(r["s"] for r in rows if r["way"] == "pinned H2D, one copy")
    print(f"\n{size / (1 << 30):.2f} GiB, warm, median of {args.repeat}, {machine()}")
    print(f"{'group':10} {'way':56} {'s':>7} {'GB/s':>6} {'x H2D':>6}")
    for r in rows:
        r["vs_h2d"] = limit / r["s"] if "s" in r else None
        cells = f"{r['s']:7.3f} {r['gbps']:6.1f} {r['vs_h2d']:6.2f}" if "s" in r else r["error"]
        print(f"{r['group']:10} {r['way']:56} {cells}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"machine": machine(), "size_bytes": size, "repeat": args.repeat, "rows": rows}, f, indent=2)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
