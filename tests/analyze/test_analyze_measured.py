"""A mount's measured profile (readtrace probe) decides the interleave rule, the judgement of the file
system and which levers the report advises; the knowledge table only fills in where none was measured."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import PARENT, KiB, MiB, files_frame, opens
from readtrace.analyze import analyze
from readtrace.measure.profile import MountProfile
from readtrace.report.mountprofile import PRIOR, basis_line
from readtrace.report.prose import render
from readtrace.trace import make_trace

PATH, POINT = "/mnt/jfs/model.safetensors", "/mnt/jfs"
UNNAMED = "fuse.unnamedfs"  # a FUSE daemon the knowledge table does not name (JuiceFS now is: tests/compat)


def _turns(block: int, chunks: int = 64, chunk: int = 256 * KiB) -> pd.DataFrame:
    """Two forked workers on ONE inherited fd, each reading its half in order, taking turns every
    ``block`` reads: each task is in order, the merged stream out of order at every switch."""
    order = np.concatenate([np.stack([np.arange(i, i + block), np.arange(i, i + block) + chunks])
                            .reshape(-1) for i in range(0, chunks, block)])
    worker = (order >= chunks).astype(int)
    n = len(order)
    pid = PARENT + 1 + worker
    return pd.DataFrame({"ts_ns": 1_000_000 + 20_000_000 * np.arange(n), "pid": pid, "tid": pid, "comm": "python",
                         "op": "pread", "fd": 3, "ofd": -0x77770000, "path": None, "offset": order * chunk,
                         "size": chunk, "ret": chunk, "latency_ns": 20_000_000})


def _profile(penalty: float, *, keeps_cache: bool = True, readahead_gain: float | None = None) -> dict:
    p = MountProfile(dev="0:40", mountpoint=POINT, fstype=UNNAMED, source="JuiceFS:jfs", options="ro",
                     measured_at="2026-12-02T18:00:00+00:00", file=PATH, file_size=32 * MiB, sample_bytes=32 * MiB,
                     seconds=9.0, first_byte_ms=21.0, first_byte_max_ms=25.0, first_byte_samples=8, open_ms=0.2,
                     sequential_mbps=150.0, streams=4, parallel_mbps=300.0, own_fd_s=1.0, shared_fd_s=penalty,
                     handle_bytes=16 * MiB, cache_survives_open=keeps_cache, read_ahead_kb=128, max_read_kib=1024,
                     readahead_tried_kb=None if readahead_gain is None else 1024,
                     readahead_old_s=None if readahead_gain is None else readahead_gain, readahead_new_s=1.0)
    return p.data()


def _analyze(block: int, profiles: list[dict] | None, fstype: str = UNNAMED):
    reads = _turns(block)
    events = pd.concat([opens(reads, PATH), reads], ignore_index=True)
    meta = {"command": ["python", "load.py"], "exit_code": 0, "lost_events": 0}
    if profiles is not None:
        meta["mount_profiles"] = profiles
    return analyze(make_trace(events=events, files=files_frame(PATH, 32 * MiB, fstype, mountpoint=POINT), meta=meta))


def _interleave(a):
    return [f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE"]


def test_the_interleave_rule_follows_the_measured_per_handle_penalty():
    # turns of 4 reads: each task in order, the merged stream 3/4 in order: score ~0.25, under the
    # table's 0.3 (and merged 0.75 > 0.5): the prior does not flag it
    a = _analyze(4, None)
    ofd = a.streams[a.streams["kind"] == "ofd"].iloc[0]
    assert 0.2 <= ofd["interleave_score"] < 0.3 and not _interleave(a)
    assert a.measured is None and basis_line(a.measured) == PRIOR
    # measured: 4 readers on one fd took 1.5x the time of one fd each: flagged, judged on the measurement
    a = _analyze(4, [_profile(1.5)])
    [f] = _interleave(a)
    assert f.severity != "info" and f.per_handle and f.fs_known
    assert a.measured is not None and basis_line(a.measured).startswith("mount profile: measured 2026-12-02")
    assert a.summary.measured_mount["handle_penalty"] == 1.5
    # measured: no per-handle penalty: even a clear interleave (turns of 1 read, score ~1) is harmless here
    a = _analyze(1, [_profile(1.05)])
    [f] = _interleave(a)
    assert f.severity == "info" and not f.per_handle and f.score > 0.9
    rec = render(f).recommendation
    assert "own fd: not expected to help here, because 4 readers on one open file took 1.05x" in rec
    assert "open one fd per worker" not in rec
    # without a profile the table's prior decides (an unknown FUSE daemon: a generic per-handle warning)
    [f] = _interleave(_analyze(1, None))
    assert f.severity != "info" and not f.fs_known


def test_a_profile_of_another_mount_is_not_used():
    other = {**_profile(1.5), "mountpoint": "/mnt/other"}
    a = _analyze(4, [other])
    assert a.measured is None and not _interleave(a)


@pytest.mark.parametrize("keeps_cache", [True, False])
def test_prefetch_is_not_advised_where_the_mount_drops_the_page_cache_on_open(keeps_cache):
    a = _analyze(1, [_profile(1.5, keeps_cache=keeps_cache)])
    [f] = _interleave(a)
    f_rule = render(f).recommendation
    ruled_out = [r["lever"] for r in f.not_expected]
    assert ruled_out == ([] if keeps_cache else ["prefetch"])
    if not keeps_cache:
        assert "prefetch: not expected to help here, because the mount drops the page cache on every open" in f_rule


def test_the_storage_model_takes_the_measured_first_byte_and_bandwidth():
    from readtrace.analyze.storage.whatif import mount_profile

    assert mount_profile(_analyze(4, None)) is None  # a FUSE daemon the table does not name: no model
    a = _analyze(4, [_profile(1.5)])
    p = mount_profile(a)
    assert p.name == "prefetch" and p.latency_ms == 21.0 and p.measured_at.startswith("2026-12-02")
    # 32 MiB in 33.6e6 / 300e6 s = 0.112 s, less one first byte (21 ms): ~369 MB/s of link
    assert p.bandwidth_mbps == pytest.approx(32 * MiB / (32 * MiB / 300e6 - 0.021) / 1e6, rel=1e-3)
    assert mount_profile(_analyze(4, [_profile(1.05)])).name == "nfs"  # no per-handle penalty: stateless
    assert a.summary.prediction.mount_latency_ms == 21.0
    assert not p.latency_recorded and not a.summary.prediction.mount_latency_recorded  # no FUSE request recorded


@pytest.mark.parametrize(("sequential_mbps", "parallel_mbps", "severity"),
                         [(150.0, 100.0, "high"), (10.0, 5.0, "info"), (10.0, 300.0, "high")])
def test_the_floor_is_the_fastest_read_the_probe_measured(sequential_mbps, parallel_mbps, severity):
    """A finding costs its wait less reading the same bytes in order at the faster of the probe's rates
    on that mount, one stream or 4 own-fd streams (readtrace's fixes read either way): where both are
    slower than the load's own wait, the load is at its floor (a dd of the bytes slower than the load
    had made the nfs model's floor say HIGH); where 4 streams are fast, one slow stream does not hide
    the cost (sshfs at 20 ms: one reader 3.0 s, 4 readers 0.95 s for 64 MiB)."""
    a = _analyze(1, [{**_profile(1.5), "sequential_mbps": sequential_mbps, "parallel_mbps": parallel_mbps}])
    [f] = _interleave(a)
    rate = max(sequential_mbps, parallel_mbps)
    assert f.floor_s == pytest.approx(0.021 + 32 * MiB / (rate * 1e6))
    how = "one stream" if sequential_mbps >= parallel_mbps else "4 own-fd streams"
    assert f.floor_model.startswith(f"measured: {how} {rate:.3g} MB/s")
    assert f.cost_s == pytest.approx(max(0.0, f.wait_s - f.floor_s), abs=0.05) and f.severity == severity


@pytest.mark.parametrize("gain", [1.0, 1.6])
def test_read_ahead_is_advised_only_where_it_measured_a_gain(gain):
    from lab.synthetic import load_case

    frames = load_case("sequential", chunk=128 * KiB, fstype=UNNAMED, path=PATH)
    frames["files"]["mountpoint"] = POINT
    frames["meta"]["mount_profiles"] = [_profile(1.5, readahead_gain=gain)]
    [f] = [f for f in analyze(make_trace(**frames)).findings if f.code == "SMALL_FUSE_READAHEAD"]
    rec = render(f).recommendation
    if gain < 1.1:
        assert f.severity == "info" and "echo 1024" not in rec
        assert "read_ahead_kb: not expected to help here, because raising read_ahead_kb 128 -> 1024 changed " \
               "a sequential read 1.00x" in rec
    else:
        assert "echo 1024" in rec and not f.not_expected and "not expected" not in rec


def test_a_threshold_the_user_set_is_kept_on_a_measured_mount():
    from readtrace.analyze.rules.thresholds import Thresholds

    reads = _turns(4)
    events = pd.concat([opens(reads, PATH), reads], ignore_index=True)
    meta = {"command": ["python"], "exit_code": 0, "lost_events": 0, "mount_profiles": [_profile(1.5)]}
    trace = make_trace(events=events, files=files_frame(PATH, 32 * MiB, UNNAMED, mountpoint=POINT), meta=meta)
    a = analyze(trace, Thresholds().override(["interleave_min_score=0.5"]))
    assert not _interleave(a) and a.thresholds.interleave_min_score == 0.5
    assert a.thresholds.interleave_merged_in_order_max == 0.85  # the one left at its default follows the profile


@pytest.mark.parametrize("parallel_mbps", [300.0, 10.0])
def test_each_lever_carries_its_predicted_time_and_one_predicted_not_to_gain_is_not_advised(parallel_mbps):
    """The report's levers and fix --compare's trial order read the same prediction: the whole load with
    the lever on this mount. 32 MiB waited on for 2.56 s: at 300 MB/s (4 streams, 150 one) an fd per
    reader or a prefetch is predicted well under that and advised with its time; at 10 MB/s (3.4 s for
    the bytes alone) neither is predicted to gain, so neither is advised, and the numbers say why."""
    from readtrace.analyze.storage.levers import io_model
    from readtrace.fix.candidates import OWN, Candidate
    from readtrace.fix.predict import predicted_s

    a = _analyze(1, [{**_profile(1.5), "parallel_mbps": parallel_mbps, "sequential_mbps": parallel_mbps / 2}])
    [f] = _interleave(a)
    wall, rec = a.summary.wall_s, render(f).recommendation
    by_lever = {p["lever"]: p["predicted_s"] for p in f.lever_predictions}
    own_fd, _ = predicted_s(Candidate("readtrace own-fd", "own-fd", OWN["own-fd"]), wall, io_model(a))
    if parallel_mbps > 100:
        assert set(by_lever) == {"own fd", "prefetch"} and not f.not_expected
        assert all(0 < t < 0.5 * wall for t in by_lever.values())
        assert by_lever["own fd"] == pytest.approx(own_fd, abs=1e-3)  # what fix's trials are ordered by
        assert "predicted on this mount: own fd ~" in rec and "open one fd per worker" in rec
        from readtrace.report.prose import fixed_line

        assert "predicted on this mount (the rates readtrace probe measured 2026-12-02 18:00 UTC;" in fixed_line(a.summary)
    else:
        assert not f.lever_predictions and own_fd > wall
        assert {r["lever"] for r in f.not_expected} == {"own fd", "prefetch"}
        assert "open one fd per worker" not in rec and "prefetch the file" not in rec
        assert "own fd: not expected to help here, because the load is predicted at ~3." in rec


@pytest.mark.parametrize("keeps_cache", [True, False])
def test_the_fixed_prediction_is_what_fix_can_run_on_the_mount(keeps_cache):
    """Two forked workers on one fd, a load fix does not route: where the mount keeps the page cache the
    fixed prediction is fix's start-up prefetch; where it was measured to drop it on open, one in-order
    reader per file (fix's own fd per forked worker), never the prefetch fix cannot run there."""
    from readtrace.report.prose import fixed_line

    a = _analyze(4, [_profile(5.0, keeps_cache=keeps_cache)])
    assert a.summary.prediction.fixed_strategy == ("prefetch" if keeps_cache else "sequential")
    line = fixed_line(a.summary)
    assert ("fix's prefetch" if keeps_cache else "fix's own fd per forked worker") in line, line


def test_own_fds_of_forked_workers_gain_nothing_a_stateless_mount_does_not_charge():
    """Forked workers on one fd, a mount measured to drop the page cache: where it punishes a shared
    handle (a per-handle model) their own fds are predicted as one in-order reader per file, faster
    than the recorded reads; where it does not (a stateless model: each task's stream is its own
    already) as the recorded reads themselves (sshfs 256 MiB fork pool: fix stopped its own fds at
    10.9 s against 11.1 s shared, where one in-order reader had predicted 3.6 s)."""
    from readtrace.analyze.storage.whatif import own_mount_predictions

    [punished] = own_mount_predictions(_analyze(4, [_profile(5.0, keeps_cache=False)]))
    assert (punished.profile, punished.fixed_strategy) == ("prefetch", "sequential")
    assert punished.predicted_fixed_io_s < 0.5 * punished.predicted_io_s
    [stateless] = own_mount_predictions(_analyze(4, [_profile(1.05, keeps_cache=False)]))
    assert (stateless.profile, stateless.fixed_strategy) == ("nfs", "sequential")
    assert stateless.predicted_fixed_io_s == pytest.approx(stateless.predicted_io_s)


@pytest.mark.parametrize("sequential, parallel, expected", [(150.0, 300.0, 300.0), (1.22, 0.98, 1.22)])
def test_the_link_carries_at_least_what_one_stream_measured(sequential, parallel, expected):
    """The model's link rate is the better of the probe's one-stream and N-stream rates, net of a first
    byte: httpdirfs 1.2.5 (a request per ~100 ms tick) measured 0.98 MB/s by 4 streams and 1.22 by one,
    and its one-stream load_file, charged at 0.98, was predicted +21 % (-4 % at 1.22)."""
    from dataclasses import replace

    from readtrace.analyze.storage.whatif import profile, with_measured

    m = replace(MountProfile.from_data(_profile(1.0)), sequential_mbps=sequential, parallel_mbps=parallel,
                sample_bytes=4 * MiB, parallel_bytes=4 * MiB, first_byte_ms=0.0)
    assert with_measured(profile("nfs"), m).bandwidth_mbps == pytest.approx(expected)
