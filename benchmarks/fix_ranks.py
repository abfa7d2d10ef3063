"""fix --compare of a torchrun job on the lab mount: the per-rank table, measured (run as root).

    sudo .venv/bin/python benchmarks/fix_ranks.py [--size-mib 128] [--latency-ms 20] [--nproc 4]
        [--shard] [--strategy prefetch] [--repeat 1] [--out fix_ranks.json]

Builds a checkpoint, mounts it on the lab mount (gcsfuse profile, keep_cache), runs
``readtrace fix --compare`` (recorded; readtrace.fix.compare.compare) of ``torchrun --nproc_per_node N tests/workloads/rank_load.py``
(every rank loads the whole file; ``--shard``: each rank its own share of the tensors), prints the
comparison table (with its per-rank lines) and saves its --json object with the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from workloads import free_port, torchrun_cmd  # noqa: E402

from readtrace.fix.compare import compare  # noqa: E402
from readtrace.fix.compare_report import render_table, to_json  # noqa: E402
from readtrace.fix.runs import default_recorder  # noqa: E402
from readtrace.simfs import mount  # noqa: E402
from readtrace.workloads import make_checkpoint  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=128)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--shard", action="store_true", help="each rank loads its own share of the tensors")
    parser.add_argument("--strategy", default="prefetch")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="fix_ranks.json")
    args = parser.parse_args()
    recorder, why_not = default_recorder()
    if recorder is None:
        print(f"fix_ranks: {why_not} (the rank plan's spans come from the baseline's trace)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="readtrace-fix-ranks-") as tmp:
        ckpt = make_checkpoint(Path(tmp) / "bucket", args.size_mib)[0]
        size = ckpt.stat().st_size
        mnt = Path(tmp) / "mnt"
        mnt.mkdir()
        job = torchrun_cmd(args.nproc, free_port(), ROOT / "tests" / "workloads" / "rank_load.py", mnt / ckpt.name,
                           *(["--shard"] if args.shard else []))
        with mount(ckpt.parent, mnt, profile="gcsfuse", latency_ms=args.latency_ms, keep_cache=True):
            started = time.perf_counter()
            result = compare(job, strategy=args.strategy, repeat=args.repeat, recorder=recorder, cwd=tmp)
            seconds = time.perf_counter() - started
    print(f"{size / 2**20:.0f} MiB, lab gcsfuse {args.latency_ms:g} ms, torchrun x{args.nproc}"
          f"{' sharded' if args.shard else ''}, strategy {args.strategy}; {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; the comparison took {seconds:.0f} s")
    render_table(result, sys.stdout)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "size_bytes": size, "seconds": seconds,
                                          "comparison": to_json(result)}, indent=1))
    print(f"saved {args.out}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
