"""`fix --compare` (strategy auto) over mounts x real loaders, with the issue's target alongside.

    python benchmarks/fix_matrix.py --size-mib 64 --latency-ms 20 \
        --mounts lab-keep lab-drop local --loaders load_file safe_open-threads transformers diffusers \
        torch-load-mmap mmap-threads

Per cell: the baseline (the unchanged script, cold), what auto chose and why, every candidate's
cold wall (readtrace's strategies and the loader's own levers), the fixed wall, tensors identical,
and the target: 1.2 x (a cold `dd bs=16M` of the same bytes on the same mount + the same script on
a warm local copy). Mounts: the lab mount (gcsfuse profile) with and without keep_cache, and the
local disk (where nothing is slow: auto must leave the load alone). Table printed, JSON under
bench-results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from readtrace.fix.compare import compare
from readtrace.fix.verdict import verdict_of
from readtrace.pagecache.prefetch import prefetch

sys.path.insert(0, str(Path(__file__).parent))
from compat_matrix import dd_seconds  # noqa: E402  (one cold dd baseline for both matrices)

SCRIPTS = {
    "load_file": """
import sys
from safetensors.torch import load_file
state = load_file(sys.argv[1])
copies = {k: v.clone() for k, v in state.items()}
""",
    "safe_open-threads": """
import sys
from concurrent.futures import ThreadPoolExecutor
from safetensors import safe_open
with safe_open(sys.argv[1], framework="pt") as f:
    with ThreadPoolExecutor(4) as pool:
        copies = list(pool.map(lambda k: f.get_tensor(k).clone(), list(f.keys())))
""",
    "transformers": """
import sys, transformers
model = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1])
""",
    "diffusers": """
import sys, diffusers
model = diffusers.UNet2DModel.from_pretrained(sys.argv[1])
""",
    "torch-load-mmap": """
import sys, torch
state = torch.load(sys.argv[1], mmap=True, weights_only=True)
copies = {k: v.clone() for k, v in state.items()}
""",
}
PATTERNS = ("mmap-threads", "fork-shared-fd")  # readtrace's example loaders (raw mmap / forked preads)


def build(loader: str, src: Path, size_mib: int) -> str:
    """Write the loader's checkpoint into ``src``; returns the argument the script takes (relative)."""
    import torch

    torch.manual_seed(0)
    if loader == "transformers":
        import transformers

        layers = max(1, int(size_mib / 29))  # ~29 MiB of float32 per layer at n_embd=768
        config = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=1000, n_positions=256)
        transformers.GPT2LMHeadModel(config).save_pretrained(src / "gpt2")
        return "gpt2"
    if loader == "diffusers":
        import diffusers

        width = 64 * max(1, round((size_mib / 60) ** 0.5 * 2))
        unet = diffusers.UNet2DModel(sample_size=32, block_out_channels=(width, width * 2, width * 2, width * 4),
                                     layers_per_block=2)
        unet.save_pretrained(src / "unet")
        return "unet"
    tensors = {f"w{i}": torch.randn(1024, 256) for i in range(size_mib)}  # 1 MiB each
    if loader == "torch-load-mmap":
        torch.save(tensors, src / "model.pt")
        return "model.pt"
    from readtrace.workloads import make_checkpoint

    if loader in PATTERNS:
        return make_checkpoint(src, size_mib)[0].name
    from safetensors.torch import save_file

    save_file(tensors, src / "model.safetensors")
    return "model.safetensors"


def command(loader: str, work: Path, target: str) -> list[str]:
    if loader in PATTERNS:
        return [sys.executable, "-m", "readtrace.workloads.load", "--pattern", loader, "--workers", "4", target]
    script = work / f"load_{loader.replace('-', '_')}.py"  # not named like the library it imports
    script.write_text(SCRIPTS[loader])
    return [sys.executable, str(script), target]


def files_of(path: Path) -> list[str]:
    if path.is_dir():
        return sorted(str(p) for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt"))
    return [str(path)]


def warm_local_s(cmd: list[str], files: list[str]) -> float:
    prefetch(files, progress=False)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started


@contextmanager
def mounted(kind: str, src: Path, root: Path, latency_ms: float):
    if kind == "local":
        yield src
        return
    from readtrace.simfs import force_unmount, mount

    mnt = Path(tempfile.mkdtemp(prefix=f"mnt-{kind}-", dir=root))
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=latency_ms, keep_cache=kind == "lab-keep"):
            yield mnt
    finally:
        force_unmount(mnt)


def cell(kind: str, loader: str, size_mib: int, latency_ms: float, root: Path) -> dict:
    src = root / f"src-{loader}"
    src.mkdir(exist_ok=True)
    if not any(src.iterdir()):
        build(loader, src, size_mib)
    target = next(p.name for p in src.iterdir())
    local_cmd = command(loader, root, str(src / target))
    local_warm = warm_local_s(local_cmd, files_of(src / target))
    with mounted(kind, src, root, latency_ms) as where:
        files = files_of(where / target)
        dd = dd_seconds(files)
        cmd = command(loader, root, str(where / target))
        result = compare(cmd, files=files, log=lambda line: print(f"    {line}", file=sys.stderr))
        size = sum(os.path.getsize(f) for f in files)
    base = result.side("baseline")[0].wall_s
    fixed = result.side("fixed")[0].wall_s if result.side("fixed") else None  # left alone: nothing changed ran
    target_s = 1.2 * (dd + local_warm)
    choice = result.choice
    levers = [t for t in choice.trials if t.label.startswith("lever") and t.exit_code == 0]
    best_lever = min(levers, key=lambda t: t.wall_s, default=None)
    verdict = verdict_of(result)  # a speedup only where fix --compare itself claims one (fix/verdict.py)
    return {"mount": kind, "loader": loader, "bytes": size, "verdict": verdict.word, "verdict_why": verdict.why,
            "baseline_s": base, "fixed_s": fixed, "speedup": verdict.speedup,
            "chosen": choice.chosen.label, "why": choice.why, "change": choice.chosen.change,
            "candidates": {t.label: t.wall_s for t in choice.trials if t.exit_code == 0},
            "best_lever": best_lever.label if best_lever else None,
            "best_lever_s": best_lever.wall_s if best_lever else None,
            "floor_s": choice.floor.total_s if choice.floor else None,
            "dd_s": dd, "warm_local_s": local_warm, "target_s": target_s,
            "identical": result.diff.all_identical, "tensors": result.diff.count, "notes": result.notes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--mounts", nargs="+", default=["lab-keep", "lab-drop", "local"])
    parser.add_argument("--loaders", nargs="+", default=[*SCRIPTS, *PATTERNS])
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fix-matrix-", dir="/var/tmp") as tmp:
        for kind in args.mounts:
            for loader in args.loaders:
                print(f"== {kind} x {loader}", file=sys.stderr)
                rows.append(cell(kind, loader, args.size_mib, args.latency_ms, Path(tmp)))
                print(json.dumps(rows[-1]), file=sys.stderr)
    print(f"{args.size_mib} MiB, lab mount gcsfuse profile {args.latency_ms:g} ms, {os.cpu_count()} CPUs")
    print("| mount | loader | baseline s | fixed s | verdict | speedup | auto chose | best lever (s) | target s | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lever = f"{r['best_lever'].removeprefix('lever ')} {r['best_lever_s']:.2f}" if r["best_lever"] else "-"
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        fixed = "- (left alone)" if r["fixed_s"] is None else f"{r['fixed_s']:.2f}"
        print(f"| {r['mount']} | {r['loader']} | {r['baseline_s']:.2f} | {fixed} | {r['verdict']} | {speedup} "
              f"| {r['chosen']} | {lever} | {r['target_s']:.2f} | {'yes' if r['identical'] else 'NO'} |")
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    path = out / f"fix_matrix-{int(time.time())}.json"
    path.write_text(json.dumps(rows, indent=1))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
