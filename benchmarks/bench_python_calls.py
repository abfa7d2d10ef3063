"""Cost of the python_calls view inside the user's process: a loader run with and without the hook.

Runs the same script (safe_open + get_tensor of every tensor, then load_file, of a checkpoint with
many small tensors: the worst case, one recorded line per tensor) under plain Python and under the
environment ``readtrace record`` gives it (readtrace.record.pycalls), alternating, and prints the
median wall time of each, the ratio and the cost per recorded call; then the same get_tensor loop
in this process, plain and wrapped (inject/calls.py), side by side: the per-call cost without the
noise of process start-up. No probes: this is the hook alone.

  .venv/bin/python benchmarks/bench_python_calls.py --tensors 4096 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_report import save_result

SCRIPT = """
import sys
from safetensors import safe_open
from safetensors.torch import load_file
with safe_open(sys.argv[1], "pt") as f:
    for name in f.keys():
        f.get_tensor(name)
load_file(sys.argv[1])
"""


def _run(cmd: list[str], env: dict | None) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    return time.perf_counter() - started


def _in_process(ckpt: Path, log: Path, repeat: int) -> tuple[float, float]:
    """Median seconds of the get_tensor loop, plain and wrapped, alternating in this process."""
    import os

    import safetensors

    os.environ["READTRACE_CALLS"] = str(log)
    log.touch()
    from readtrace.inject import calls

    plain_open = safetensors.safe_open
    calls.wrap("safetensors", safetensors)
    wrapped_open = safetensors.safe_open

    def loop(opener) -> float:
        started = time.perf_counter()
        with opener(str(ckpt), "pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has keys(), no __iter__ of names
                f.get_tensor(name)
        return time.perf_counter() - started

    pairs = [(loop(plain_open), loop(wrapped_open)) for _ in range(repeat)]
    return statistics.median(p for p, _ in pairs), statistics.median(w for _, w in pairs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="bench-results/bench_python_calls.json")
    args = p.parse_args()
    import torch
    from safetensors.torch import save_file

    from readtrace.record.pycalls import python_calls

    with tempfile.TemporaryDirectory() as tmp:
        ckpt, script = Path(tmp) / "model.safetensors", Path(tmp) / "load.py"
        save_file({f"t{i}": torch.zeros(256) for i in range(args.tensors)}, ckpt)
        script.write_text(SCRIPT)
        cmd = [sys.executable, str(script), str(ckpt)]
        plain, hooked, rows = [], [], 0
        for _ in range(args.repeat):
            plain.append(_run(cmd, None))
            with python_calls(None, None) as calls:
                hooked.append(_run(cmd, calls.env))
                rows = calls.read()[1]["rows"]
        loop_plain, loop_wrapped = _in_process(ckpt, Path(tmp) / "calls.jsonl", args.repeat)
    base, with_hook = statistics.median(plain), statistics.median(hooked)
    result = {"tensors": args.tensors, "repeat": args.repeat, "recorded_calls": rows, "plain_s": base,
              "hooked_s": with_hook, "ratio": with_hook / base, "us_per_call": (with_hook - base) / rows * 1e6,
              "plain_all_s": plain, "hooked_all_s": hooked, "loop_plain_s": loop_plain,
              "loop_wrapped_s": loop_wrapped, "loop_us_per_call": (loop_wrapped - loop_plain) / args.tensors * 1e6}
    print(f"{'run':<10}{'median s':>10}")
    print(f"{'plain':<10}{base:>10.3f}\n{'hooked':<10}{with_hook:>10.3f}")
    print(f"ratio {result['ratio']:.3f}, {rows} recorded calls, {result['us_per_call']:.1f} us per call")
    print(f"in process: get_tensor x {args.tensors} plain {loop_plain * 1e3:.1f} ms, wrapped {loop_wrapped * 1e3:.1f} ms: "
          f"{result['loop_us_per_call']:.1f} us per call")
    save_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
