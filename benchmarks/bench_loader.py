"""Benchmark: the own-fd loader against dd, safetensors, fastsafetensors and runai-model-streamer.

Each loader reads the same checkpoint, cold (its pages evicted first) and warm (prefetched first),
runs interleaved, median of --repeat. Every loader's result is fully touched (one byte per page of
every tensor), so lazy mmap results pay for their page faults like the others pay for their copies.
With --device cuda: every loader targets the GPU, plus a pinned host-to-device copy as reference.

    python benchmarks/bench_loader.py                  # 1 GiB on /var/tmp, CPU
    python benchmarks/bench_loader.py --device cuda --size-mib 4096 --dir /dev/shm ...

Targets (issue 5): cold own-fd >= 0.90 x dd bs=16M; on CUDA, warm own-fd >= 0.80 x pinned H2D and
faster than safetensors load_file(device="cuda"). Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file as st_load_file
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from readtrace.loader.devicecopy import wait_unpinned  # noqa: E402
from readtrace.loader.loader import load_file  # noqa: E402
from readtrace.pagecache.evict import evict  # noqa: E402
from readtrace.pagecache.prefetch import prefetch  # noqa: E402

MiB = 1 << 20
Loader = Callable[[str, str], Callable[[], None]]  # (path, device) -> run (loads, touches, frees)


def make_checkpoint(path: str, size: int) -> None:
    """~size bytes in 64 tensors of mixed dtypes, written with safetensors itself."""
    gen = torch.Generator().manual_seed(0)
    per = size // 64
    tensors = {}
    for i in range(64):
        dtype = (torch.float32, torch.bfloat16, torch.float16, torch.float32)[i % 4]
        tensors[f"layer{i:02d}.weight"] = torch.rand(per // dtype.itemsize, generator=gen).to(dtype)
    save_file(tensors, path)


def touch(tensors) -> None:
    """Read one byte per 4 KiB page of every tensor (forces lazy mmap pages in, syncs CUDA)."""
    for t in tensors:
        flat = t.reshape(-1)
        if flat.numel():
            flat.view(torch.uint8)[::4096].max()
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def own_fd(threads: int, cpu_storage: str = "copy", register_cached: bool = False) -> Loader:
    def make(path, device):
        return lambda: touch(load_file(path, device, threads=threads, cpu_storage=cpu_storage,
                                       register_cached=register_cached).values())
    return make


def prefetch_then_mmap(path, device):
    """The ``prefetch`` strategy: own-fd sequential read into the page cache, then the mmap loader."""
    def run():
        prefetch([path], progress=False)
        touch(st_load_file(path, device=device).values())
    return run


def safetensors_mmap(path, device):
    return lambda: touch(st_load_file(path, device=device).values())


def safetensors_pread(path, device):
    return lambda: touch(st_load_file(path, device=device, backend="pread").values())


def fastsafetensors(path, device):
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup

    def run():
        loader = SafeTensorsFileLoader(SingleGroup(), "cuda:0" if device == "cuda" else device, nogds=True)
        try:
            loader.add_filenames({0: [path]})
            files = loader.copy_files_to_device()
            touch(files.get_tensor(k) for k in loader.get_keys())
            files.close()
        finally:
            loader.close()
    return run


def runai_streamer(path, device):
    from runai_model_streamer import SafetensorsStreamer

    def run():
        with SafetensorsStreamer() as streamer:
            streamer.stream_file(path, device=device)
            touch(t.clone() for _, t in streamer.get_tensors())  # the buffer is reused: keep copies
    return run


def dd(path, device):
    return lambda: subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M"], check=True,
                                  capture_output=True)


def pinned_h2d(path, device):
    """Reference: copy the same number of bytes from pinned host memory to the GPU (no file)."""
    size = os.path.getsize(path)
    src = torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def run():
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
    return run


def available(name: str) -> str | None:
    """None when the loader can run here, else why not."""
    modules = {"fastsafetensors": "fastsafetensors", "runai-model-streamer": "runai_model_streamer"}
    if name in modules:
        try:
            __import__(modules[name])
        except ImportError as e:
            return f"not installed ({e})"
    return None


_libc = ctypes.CDLL(None)


def measure(run: Callable[[], None], path: str, cold: bool) -> float:
    if cold:
        evict([path])
    else:
        prefetch([path], progress=False)
    gc.collect()
    # Give freed heap memory back to the kernel: a real load gets fresh memory and pays for touching
    # it first; without this, loaders allocating many small tensors would reuse the last run's pages.
    _libc.malloc_trim(0)
    wait_unpinned()  # the last load's registered pages, let go in the background
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    gc.collect()
    return elapsed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--dir", default="/var/tmp", help="where the checkpoint is written (a disk, for cold runs)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="own-fd reader thread counts to try (default: 1 2 on CPU, 4 16 on CUDA)")
    p.add_argument("--out", default="bench-results/bench_loader.json")
    p.add_argument("--checkpoint", help="an existing checkpoint to read (never written) instead of making one")
    p.add_argument("--only", nargs="+", help="only the loaders whose names contain one of these words")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_loader: --device cuda but no CUDA GPU", file=sys.stderr)
        return 3
    threads = args.threads or ([1, 2] if args.device == "cpu" else [4, 16])
    loaders: dict[str, Loader] = {"dd bs=16M": dd}
    copy = " (copy)" if args.device == "cpu" else ""
    loaders.update({f"readtrace own-fd{copy} x{t}": own_fd(t) for t in threads})
    if args.device == "cpu":
        loaders["readtrace own-fd (map) x1"] = own_fd(1, "map")
    else:  # warm: the staging buffers (the default) against the cached pages registered for DMA
        loaders[f"readtrace own-fd x{max(threads)} (registered pages)"] = own_fd(max(threads), register_cached=True)
    loaders.update({"readtrace prefetch + mmap load": prefetch_then_mmap,
                    "safetensors load_file (mmap)": safetensors_mmap,
                    "safetensors load_file (pread)": safetensors_pread,
                    "fastsafetensors": fastsafetensors, "runai-model-streamer": runai_streamer})
    if args.device == "cuda":
        loaders["pinned H2D copy (reference)"] = pinned_h2d

    if args.only:
        loaders = {n: f for n, f in loaders.items() if any(w in n for w in args.only)}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-loader-") as tmp:
        path = args.checkpoint or os.path.join(tmp, "model.safetensors")
        if not args.checkpoint:
            make_checkpoint(path, args.size_mib * MiB)
        size = os.path.getsize(path)
        skipped = {name: why for name in loaders if (why := available(name))}
        runs = {name: make(path, args.device) for name, make in loaders.items() if name not in skipped}
        times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in runs}
        for _ in range(args.repeat):
            for temperature in ("cold", "warm"):
                for name, run in runs.items():
                    if name.startswith("pinned") and temperature == "cold":
                        continue  # no file involved
                    try:
                        times[name][temperature].append(measure(run, path, temperature == "cold"))
                    except Exception as e:  # noqa: BLE001 - a peer loader failing is a result, not a crash
                        skipped[name] = f"failed: {type(e).__name__}: {e}"
                        break
        evict([path])
    rows = summarise(times, size, skipped)
    report = {"machine": machine(), "device": args.device, "size_bytes": size, "repeat": args.repeat,
              "dir": args.dir, "rows": rows, "skipped": skipped}
    print_table(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"\nsaved {args.out}")
    return 0


def summarise(times, size: int, skipped: dict) -> list[dict]:
    med = {n: {k: statistics.median(v) if v else None for k, v in t.items()} for n, t in times.items()
           if n not in skipped}
    ref_cold = med.get("dd bs=16M", {}).get("cold")
    ref_warm = med.get("pinned H2D copy (reference)", {}).get("warm") or med.get("dd bs=16M", {}).get("warm")
    rows = []
    for name, m in med.items():
        row = {"loader": name}
        for temp, ref in (("cold", ref_cold), ("warm", ref_warm)):
            s = m[temp]
            row[f"{temp}_s"] = s
            row[f"{temp}_gbps"] = size / s / 1e9 if s else None
            row[f"{temp}_vs_ref"] = ref / s if s and ref else None
        rows.append(row)
    return rows


def print_table(report: dict) -> None:
    size_gib = report["size_bytes"] / (1 << 30)
    warm_ref = "pinned H2D" if report["device"] == "cuda" else "dd"
    print(f"\n{size_gib:.2f} GiB checkpoint, device={report['device']}, median of {report['repeat']}, "
          f"{report['machine']}")
    print(f"{'loader':34} {'cold s':>7} {'GB/s':>6} {'x dd':>6}   {'warm s':>7} {'GB/s':>6} {'x ' + warm_ref:>9}")

    def f(v, fmt):
        return format(v, fmt) if v is not None else "-"

    for r in report["rows"]:
        print(f"{r['loader']:34} {f(r['cold_s'], '7.3f')} {f(r['cold_gbps'], '6.2f')} {f(r['cold_vs_ref'], '6.2f')}"
              f"   {f(r['warm_s'], '7.3f')} {f(r['warm_gbps'], '6.2f')} {f(r['warm_vs_ref'], '9.2f')}")
    for name, why in report["skipped"].items():
        print(f"{name:34} skipped: {why}")


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{platform.node()}: {os.cpu_count()} CPUs, {mem:.0f} GiB, Linux {platform.release()}{gpu}"


if __name__ == "__main__":
    sys.exit(main())
