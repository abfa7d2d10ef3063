"""What each finding costs, and how severe that makes it: one cause per wasted second.

A finding's cost is the wall time the load lost on its file: the file's share of the load's wait
(timesplit.shared_by_file: each instant of waiting split among the files waited on then, so the
shares add up to the load's wait, never above the wall) less ``floor_s``, what one sequential read
of the same bytes costs on that mount (the sequential stream ``readtrace probe`` measured on that
mount; else whatif.sequential_read_s with the file system's model; unknown where no model knows the
file system, and then the whole share counts). Several findings often describe one wait (interleaved faults on a
cold FUSE handle: SHARED_FD_INTERLEAVE, MMAP_FAULT_STORM and COLD_CACHE): the first of them in
``PRECEDENCE`` is the cause and is charged the seconds; the others say how it shows (``role``
"mechanism", or "precondition" for a cold cache) and cost nothing of their own.

Severity follows the seconds (the rules are Thresholds fields, printed in docs/report.md): a rule's
own severity is the most a finding can get (a pattern that is harmless on its file system stays
INFO); HIGH needs ``high_min_s`` and ``high_min_wall_fraction`` of the wall; under ``warn_min_s`` or
``warn_min_wall_fraction`` it is INFO, whatever the counters say; a cost that cannot be known (no
wall or no waits in the trace) is at most WARN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from readtrace.analyze.rules.types import SEVERITIES, Finding
from readtrace.analyze.storage import whatif
from readtrace.fs.knowledge import fs_profile

if TYPE_CHECKING:
    from readtrace.analyze.analysis import Analysis
    from readtrace.analyze.rules.thresholds import Thresholds

# Which of the findings on one file is the cause of its wait (the first listed that its rule does
# not call harmless there): the access pattern before what it does to the cache, requests and faults.
PRECEDENCE = ("SHARED_FD_INTERLEAVE", "RANDOM_ON_FUSE_HANDLE", "CACHE_EVICTED_REREAD", "MMAP_FAULT_STORM",
              "SMALL_REQUESTS", "SMALL_FUSE_READAHEAD", "COLD_CACHE")
PRECONDITIONS = frozenset({"COLD_CACHE"})  # what lets the cause cost, not how it costs
SLACK_S = 1e-6  # float rounding of the sums
# The floor's per-request cost: a low quantile of the recording's continuing requests, not their median.
# On a handle read at random many "continuing" requests still paid for a new backend range or queued in
# the daemon: on the lab mount at 20 ms, mmap-threads' median was 10.3 ms a request (a 64 MiB floor of
# 5.3 s, where the sequential load of the same file waited 0.44 s), its 10th percentile 2.2 ms (1.1 s);
# the sequential load's own was 0.07-0.1 ms either way. A measured mount profile (issue 21) replaces it.
FLOOR_REQUEST_QUANTILE = 0.1


def by_seconds(cost_s: float | None, wall_s: float | None, th: Thresholds) -> str:
    """The severity the seconds allow (the rules in the module docstring)."""
    if cost_s is None or not wall_s:
        return "warn"
    share = cost_s / wall_s
    if cost_s < th.warn_min_s or share < th.warn_min_wall_fraction:
        return "info"
    return "high" if cost_s >= th.high_min_s and share >= th.high_min_wall_fraction else "warn"


def milder(a: str, b: str) -> str:
    return max(a, b, key=SEVERITIES.index)


def _floor(row, fstype: str, mount: whatif.Profile | None, measured: dict) -> tuple[float | None, str]:
    """(seconds reading what the load needed of the file in order costs on its mount, model): where
    ``measured`` (mountpoint -> MountProfile) has the mount, the faster of the probe's one stream and its
    N own-fd streams (readtrace's prefetch and own-fd loader read either way: on sshfs at 20 ms, 64 MiB
    took 3.0 s with one reader and 0.95 s with 4), else the storage model of its file system."""
    probed = measured.get(row.get("mountpoint")) if row is not None else None
    if probed is not None and probed.sequential_mbps > 0:
        streams = probed.streams if probed.parallel_mbps > probed.sequential_mbps else 1
        rate, how = ((probed.parallel_mbps, f"{streams} own-fd streams") if streams > 1
                     else (probed.sequential_mbps, "one stream"))
        seconds = probed.first_byte_ms / 1000.0 + probed.read_s(whatif.needed_bytes(row), streams)
        return seconds, f"measured: {how} {rate:.3g} MB/s, {probed.first_byte_ms:.3g} ms first byte"
    name = fs_profile(fstype).storage_model
    if name is None and mount is not None and mount.measured_at:
        name = mount.name  # a file system the table has no model for, measured on this mount
    if name is None or row is None:
        return None, ""
    p = mount if mount is not None and mount.name == name else whatif.profile(name)
    return whatif.sequential_read_s(whatif.needed_bytes(row), p), f"{p.name} model, {p.latency_ms:.3g} ms first byte"


def _cause(group: list[Finding]) -> Finding:
    rank = {c: i for i, c in enumerate(PRECEDENCE)}
    ordered = sorted(group, key=lambda f: (f.severity == "info", rank.get(f.code, len(rank))))
    return ordered[0]


def assign(a: Analysis, wait_by_path: pd.Series, share_by_path: pd.Series) -> None:
    """Fill every finding's wait, floor and cost, name one cause per file, set severities from the
    seconds and order the findings: causes by severity then cost, each followed by how it shows."""
    th, wall = a.thresholds, a.summary.wall_s
    timed = wall is not None and a.summary.time.io_wait_s is not None and len(wait_by_path) > 0
    mount = whatif.mount_profile(a, FLOOR_REQUEST_QUANTILE) if timed else None
    files = a.files.drop_duplicates("path").set_index("path")
    groups: dict[str, list[Finding]] = {}
    for f in a.findings:
        if f.file is not None and f.code in PRECEDENCE:
            groups.setdefault(f.file, []).append(f)
    for path, group in groups.items():
        row = files.loc[path] if path in files.index else None
        wait = float(wait_by_path.get(path, 0.0)) if timed else None
        share = float(share_by_path.get(path, 0.0)) if timed else None
        floor, model = _floor(row, group[0].fstype, mount, a.mount_profiles) if timed else (None, "")
        cost = None if share is None else min(share, max(0.0, share - (floor or 0.0)))  # a floor < 0: none
        cause = _cause(group)
        for f in group:
            f.wait_s, f.floor_s, f.floor_model = wait, floor, model
            if f is cause:
                f.cost_s, f.cost_fraction = cost, (cost / wall if cost is not None and wall else None)
                f.severity = milder(f.severity, by_seconds(cost, wall, th))
                continue
            f.role = "precondition" if f.code in PRECONDITIONS else "mechanism"
            f.cause, f.severity = cause.code, "info"
            f.cost_s, f.cost_fraction = (None, None) if cost is None else (0.0, 0.0)
    total = sum(f.cost_s for f in a.findings if f.cost_s)
    if wall is not None and total > wall:  # a wall clock shorter than the waits' span (record -p attached late)
        for f in a.findings:
            if f.cost_s:
                f.cost_s *= wall / total
                f.cost_fraction = f.cost_s / wall
        total = sum(f.cost_s for f in a.findings if f.cost_s)
    assert wall is None or total <= wall + SLACK_S, (total, wall)  # shares of one wait union, at most the wall
    a.findings = ordered(a.findings)


def ordered(findings: list[Finding]) -> list[Finding]:
    """Causes (and findings about the trace) most severe first, then the costliest; each cause followed
    by the findings that say how it shows."""
    shows: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if f.cause:
            shows.setdefault((f.file, f.cause), []).append(f)
    heads = sorted((f for f in findings if not f.cause),
                   key=lambda f: (SEVERITIES.index(f.severity), -(f.cost_s or 0.0)))
    return [g for f in heads for g in [f, *shows.pop((f.file, f.code), [])]] + [g for rest in shows.values() for g in rest]
