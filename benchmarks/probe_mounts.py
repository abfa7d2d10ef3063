"""`readtrace probe` on the compat suite's mounts (lab/clients.py): one profile per client.

    python benchmarks/probe_mounts.py --size-mib 128 --latency-ms 20 lab s3fs rclone httpdirfs sshfs bindfs \
        juicefs squashfuse

Each client serves a fresh random file of --size-mib through its mount (servers on 127.0.0.1, stopped
after); prints the profile (docs/probe.md) and, with --json FILE, writes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness, not shipped)

from lab.clients import CLIENTS, missing, mounted  # noqa: E402
from readtrace.measure.probe import probe  # noqa: E402
from readtrace.pagecache.evict import evict  # noqa: E402
from readtrace.report.mountprofile import profile_lines  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clients", nargs="*", default=[c for c in CLIENTS if c != "local"])
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="readtrace-probe-") as work:
        src = Path(work) / "src"
        src.mkdir()
        with open(src / "model.bin", "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        for client in args.clients:
            why = missing(client)
            if why:
                print(f"{client}: skipped ({why})")
                continue
            with mounted(client, src, Path(work) / client, latency_ms=args.latency_ms) as m:
                evict([str(p) for p in m.backing])  # squashfuse's image: cold under the mount too
                started = time.monotonic()
                p = probe(m.path("model.bin"))
                print(f"== {client} ({time.monotonic() - started:.1f} s, load {os.getloadavg()[0]:.1f})")
                print("\n".join(profile_lines(p)), flush=True)
                out.append({"client": client, "latency_ms": args.latency_ms, **p.data()})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
