"""What findings cost (analyze/rules/cost.py): severity follows the seconds, one cause per wasted second, and
the seconds of all findings add up to no more than the wall (issue 22), on synthetic traces with
known times."""

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import files_frame, load_case
from readtrace.analyze import Thresholds, analyze
from readtrace.analyze.views.timesplit import shared_by_file, union_ns
from readtrace.trace import make_trace


def causes(a):
    return [f for f in a.findings if f.role == "cause" and f.cost_s is not None]


def test_shares_split_each_instant_among_the_files_waited_on():
    # file 1 waits [0, 10), file 2 waits [5, 15) and [12, 20) (overlapping its own), file 3 [30, 31)
    start = np.array([0, 5, 12, 30], dtype=np.int64) * 10**9
    end = np.array([10, 15, 20, 31], dtype=np.int64) * 10**9
    share = shared_by_file(start, end, np.array([1, 2, 2, 3]))
    assert share.to_dict() == pytest.approx({1: 5 + 2.5, 2: 2.5 + 10, 3: 1.0})
    assert share.sum() == pytest.approx(union_ns(start, end) / 1e9)  # 21 s: never the 31 s of the unions


def _two_files(read_ms: float = 20) -> dict:
    """Two checkpoints, each read by 4 forked workers taking turns on one shared fd, at the same time:
    each file's own wait is the whole wall, so per-file waits add up to twice it."""
    a = load_case("shared", read_ms=read_ms, path="/mnt/model/a.safetensors")
    b = load_case("shared", read_ms=read_ms, path="/mnt/model/b.safetensors")
    ev, fu = b["events"].copy(), b["fuse"].copy()
    for df in (ev, fu):
        df["pid"] += 10
        df["tid"] += 10
    ev["ofd"] -= 0x1000000
    ev.loc[ev["op"] == "open", "ino"] = 3
    fu["nodeid"], fu["fh"], fu["unique"] = np.uint64(3), fu["fh"] + np.uint64(10), fu["unique"] + 10**6
    files = pd.concat([a["files"], files_frame("/mnt/model/b.safetensors", 64 << 20, "fuse.gcsfuse", ino=3)],
                      ignore_index=True)
    return {"events": pd.concat([a["events"], ev], ignore_index=True),
            "fuse": pd.concat([a["fuse"], fu], ignore_index=True), "files": files, "meta": a["meta"]}


def test_seconds_of_all_findings_add_up_to_no_more_than_the_wall():
    a = analyze(make_trace(**_two_files()))
    wall = a.summary.wall_s
    shared = [f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE"]
    assert len(shared) == 2 and all(f.wait_s == pytest.approx(wall, rel=0.01) for f in shared)  # 2x the wall
    assert sum(f.cost_s for f in a.findings if f.cost_s) <= wall
    assert [f.cost_s for f in shared] == pytest.approx([wall / 2] * 2, rel=0.02)
    # each half still costs >= 1 s and >= 20 % of the wall
    assert {f.severity for f in shared} == {"high"}


def test_one_cause_per_file_the_others_say_how_it_shows():
    a = analyze(make_trace(**load_case("shared", read_ms=20, cold=True)))
    by_code = {f.code: f for f in a.findings}
    cause = by_code["SHARED_FD_INTERLEAVE"]
    assert cause.role == "cause" and cause.severity == "high" and cause.cost_s > 5
    assert cause.cost_fraction == pytest.approx(cause.cost_s / a.summary.wall_s)
    assert (by_code["COLD_CACHE"].role, by_code["COLD_CACHE"].cause) == ("precondition", "SHARED_FD_INTERLEAVE")
    assert (by_code["SMALL_REQUESTS"].role, by_code["SMALL_REQUESTS"].cause) == ("mechanism", "SHARED_FD_INTERLEAVE")
    assert {f.severity for f in a.findings if f.cause} == {"info"} and all(f.cost_s == 0 for f in a.findings if f.cause)
    # the cause leads, how it shows follows it
    assert [f.code for f in a.findings][0] == "SHARED_FD_INTERLEAVE"
    assert sum(f.cost_s for f in a.findings if f.cost_s) <= a.summary.wall_s


def test_high_needs_seconds():
    fast = analyze(make_trace(**load_case("shared")))  # 256 reads in 2.6 ms: the counters alone say interleave
    f = next(f for f in fast.findings if f.code == "SHARED_FD_INTERLEAVE")
    assert f.score == pytest.approx(1.0, abs=0.01) and f.cost_s < 0.01 and f.severity == "info"
    slow = make_trace(**load_case("shared", read_ms=20))
    assert next(f for f in analyze(slow).findings if f.code == "SHARED_FD_INTERLEAVE").severity == "high"
    # the rules are thresholds: 5 s is not >= 10 s, and 100 % of the wall is >= 5 %: WARN
    th = Thresholds().override(["high_min_s=10"])
    assert next(f for f in analyze(slow, th).findings if f.code == "SHARED_FD_INTERLEAVE").severity == "warn"
    # under either INFO rule it is INFO, whatever else holds (a share rule above 1 turns everything INFO)
    th = Thresholds().override(["warn_min_wall_fraction=1.5"])
    assert next(f for f in analyze(slow, th).findings if f.code == "SHARED_FD_INTERLEAVE").severity == "info"


def test_harmless_pattern_is_not_the_cause():
    # on sshfs (no per-handle stream) the interleave is harmless: the small reads carry the wait
    a = analyze(make_trace(**load_case("shared", read_ms=20, fstype="fuse.sshfs", with_fuse=False)))
    by_code = {f.code: f for f in a.findings}
    assert by_code["SHARED_FD_INTERLEAVE"].severity == "info"
    assert by_code["SHARED_FD_INTERLEAVE"].cause == "SMALL_REQUESTS" and by_code["SMALL_REQUESTS"].role == "cause"


def test_the_findings_heading_says_what_the_causes_explain():
    from readtrace.report.prose import findings_line

    a = analyze(make_trace(**_two_files()))
    wall = a.summary.wall_s
    assert findings_line(a.findings, wall, a.thresholds) == (
        f"Findings: 2 cause(s) cost {wall:.3g} s of the {wall:.3g} s wall (100%) over their floor; HIGH needs "
        ">= 1 s and >= 20% of the wall")


def test_a_wall_clock_shorter_than_the_waits_bounds_the_seconds():
    # the recorder's wall clock can start after the first wait (record -p attached to a running load)
    frames = _two_files()
    frames["meta"] = {**frames["meta"], "wall_s": 2.0}
    a = analyze(make_trace(**frames))
    assert sum(f.cost_s for f in a.findings if f.cost_s) == pytest.approx(2.0)
    assert all(f.cost_fraction <= 1 for f in a.findings if f.cost_s)
