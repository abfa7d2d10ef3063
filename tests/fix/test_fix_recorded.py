"""`fix --compare TRACE` counts the recorded run as a cold baseline run (fix/recorded.py, issue 23):
recorded for real on the lab mount (20 ms first byte), with readtrace's example loader, then compared."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import fuse_available, lab_mount, require
from workloads import ebpf_ready

from readtrace.fix.compare import compare
from readtrace.fix.compare_report import to_json
from readtrace.fix.recorded import recorded_run
from readtrace.fix.runs import default_recorder
from readtrace.pagecache.evict import evict
from readtrace.pagecache.prefetch import prefetch
from readtrace.simfs import force_unmount, mount
from readtrace.trace import load_trace
from readtrace.workloads import make_checkpoint
from readtrace.workloads.layout import read_layout

pytestmark = [pytest.mark.fuse, pytest.mark.ebpf, pytest.mark.slow]


@pytest.fixture(scope="module", params=[True, False], ids=["keep-cache", "drops-cache"])
def lab(tmp_path_factory, request):
    require(*fuse_available())
    require(*ebpf_ready())
    src, mnt = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("mnt")
    path = make_checkpoint(src, 16)[0]
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=20, keep_cache=request.param):
            file = f"{mnt}/{path.name}"
            cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "mmap-threads", "--workers", "4",
                   file]
            yield cmd, file, len(read_layout(path)), request.param, path
    finally:
        force_unmount(mnt)


def _record(cmd, file, out, cold=True):
    (evict if cold else prefetch)([file], **({} if cold else {"progress": False}))
    done = subprocess.run([sys.executable, "-m", "readtrace", "record", "-o", str(out), "--", *cmd],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return str(out)


def _compare(cmd, file, trace, budget=None):
    recorder, why = default_recorder()
    require(recorder is not None, why or "")
    lines = []
    result = compare(cmd, files=[file], recorder=recorder, recorded_from=trace, log=lines.append, budget=budget)
    return result, lines


def test_the_cold_recorded_run_is_a_baseline_run_and_is_not_run_again(lab, tmp_path):
    cmd, file, tensors, keeps_cache, _ = lab
    trace = _record(cmd, file, tmp_path / "load.rtrace")
    result, lines = _compare(cmd, file, trace)
    baselines = result.side("baseline")
    recorded = [r for r in baselines if r.recorded]
    assert len(recorded) == 1 and recorded[0].recorded == trace
    assert recorded[0].wall_s == pytest.approx(load_trace(trace).meta["wall_s"])
    assert recorded[0].loader_s is None  # no shim timed the user's run
    made = [line for line in lines if line.startswith("run ") and " baseline " in line]
    # the recorded run is baseline 1: the floor's warm run gave its tensors, from the page cache, or on the
    # mount that drops it on every open from local copies of the files (fix/localcopy.py)
    assert baselines[0] is recorded[0] and result.choice.floor is not None
    assert result.choice.floor.local_copy is not keeps_cache
    assert len(made) == len(baselines) - 1
    assert any(n.startswith("baseline run: the recorded run") for n in result.notes), result.notes
    assert result.diff.count == tensors and result.diff.all_identical and result.unproven == []
    data = to_json(result)
    runs = data["baseline"]["runs"]
    assert [r["recorded"] for r in runs].count(True) == 1
    assert next(r for r in runs if r["recorded"])["loader_s"] is None


KEEPS_CACHE = pytest.mark.parametrize("lab", [True], indirect=True, ids=["keep-cache"])


@KEEPS_CACHE  # a mount that drops the page cache on every open: every run of it is cold
def test_a_warm_recording_is_not_a_baseline_run(lab, tmp_path):
    cmd, file, tensors, keeps_cache, _ = lab
    trace = _record(cmd, file, tmp_path / "warm.rtrace", cold=False)
    found, why = recorded_run(trace, cmd, [file])
    assert found is None and "not cold" in why and "page cache" in why
    result, _ = _compare(cmd, file, trace)
    assert not any(r.recorded == trace for r in result.runs)  # the comparison records its own first baseline
    assert any("the recorded run is not a baseline run here: the recorded run was not cold" in n for n in result.notes)


@KEEPS_CACHE  # one mount is enough for the checks on the trace itself
def test_a_recording_of_another_command_or_of_files_changed_since_is_not_one(lab, tmp_path):
    cmd, file, tensors, keeps_cache, source = lab
    trace = _record(cmd, file, tmp_path / "load.rtrace")
    found, why = recorded_run(trace, cmd, [file])
    assert found is not None and why == "" and found.cold_share >= 0.9
    assert recorded_run(trace, [*cmd[:-1], "--other"], [file]) == (None, "the command compared is not the recorded one")
    # the checkpoint touched after the recording: modified since (asked of the source file: the lab
    # mount caches attributes for 60 s, as FUSE clients do)
    os.utime(source)
    found, why = recorded_run(trace, cmd, [str(source)])
    assert found is None and "was modified after the recording" in why


def test_a_recorded_load_at_its_floor_is_left_alone_with_its_evidence(tmp_path):
    """A fast mount (no added latency, the cache kept) and a command that waits 3 s longer in every run
    after the recorded one: the recorded run waited on its 16 MiB no longer than the floor's read of
    them took, so its own time stands for the warm load and nothing else runs, not even the floor's
    warm run (which would have taken 3 s longer); the floor's own eviction is the comparison's proof of
    cold (it said "nothing proven: the runs were not cold" with no run evicted at all)."""
    from readtrace.fix.verdict import verdict_of

    result, lines, trace = _recorded_and_compared(tmp_path, latency_ms=0, first_s=1, later_s=4)
    assert result.choice.trials == [] and [r.recorded for r in result.runs] == [trace]  # at its floor: nothing ran
    floor, summary = result.choice.floor, load_trace(trace).meta
    assert floor.warm_recorded and not any("the command warm" in line for line in lines), lines
    assert floor.warm_s < summary["wall_s"] < 4  # its own time, not a run's that slept 4 s
    assert to_json(result)["choice"]["floor"]["warm_from"] == "recorded run"
    assert result.unproven == [] and result.evictions, result.unproven
    assert verdict_of(result).word == "not-slow"


def test_a_recorded_load_in_its_not_slow_band_with_no_change_predicted_to_gain_has_no_warm_run(tmp_path):
    """Four threads faulting 16 MiB through a 4 ms mount after an 8 s sleep: the recorded run waited
    about 0.4 s on its checkpoint where the floor's read takes 0.02 s, so it is over the 3 % of
    "nothing to gain", but within the not-slow band, and the storage model predicts no change to its
    reads saves the 9 % a fix must save there: the band rule would try no candidate, so the warm run
    (a whole load: here one that would sleep 3 s longer) is not needed for the floor either."""
    from readtrace.fix.verdict import verdict_of

    result, lines, trace = _recorded_and_compared(tmp_path, latency_ms=4, first_s=8, later_s=11)
    assert result.choice.trials == [] and [r.recorded for r in result.runs] == [trace]
    floor, wall = result.choice.floor, load_trace(trace).meta["wall_s"]
    assert floor.warm_recorded and not any("the command warm" in line for line in lines), lines
    assert not floor.nothing_to_gain(wall) and floor.not_slow(wall) and floor.warm_s < wall < 11
    assert "within the not-slow band" in result.choice.why and "is predicted to make it 9 % faster" in result.choice.why
    verdict = verdict_of(result)
    assert verdict.word == "not-slow" and "none is predicted" in verdict.why, verdict
    assert to_json(result)["choice"]["floor"]["warm_from"] == "recorded run"


def test_a_recorded_load_in_its_band_whose_gain_costs_more_than_2x_to_prove_has_no_warm_run(tmp_path):
    """The same load at 11 ms: the recorded run waited about 1.5 s on its checkpoint in 10.9 s, so the
    storage model predicts a change to its reads 13 % faster (9.44 s), more than the 9 % a fix must gain
    within the not-slow band (to 11.4 s here); but a gain under 2x is proved by four whole loads (the floor's warm run, the trial, a
    fresh run, the baseline again), over the 2x of the baseline a comparison spends there without
    --budget: no warm run, nothing tried, the price and the --budget that buys it said."""
    from readtrace.fix.candidates import SLOW_MARGIN
    from readtrace.fix.verdict import verdict_of

    result, lines, trace = _recorded_and_compared(tmp_path, latency_ms=11, first_s=8, later_s=11)
    floor, wall = result.choice.floor, load_trace(trace).meta["wall_s"]
    assert floor.warm_recorded and not any("the command warm" in line for line in lines), lines
    assert result.choice.trials == [] and [r.recorded for r in result.runs] == [trace]
    assert floor.not_slow(wall) and not floor.nothing_to_gain(wall), (floor, wall)
    why = result.choice.why
    predicted = float(why.split("is predicted at ")[1].split(" s")[0])
    assert predicted <= wall / SLOW_MARGIN, why  # a gain the band would try, had its proof fit
    assert "proving it takes 4 cold runs (the floor's warm run, the trial, a fresh run of it, the baseline again" \
        in why and "of 2x the baseline's" in why and "--budget " in why, why
    verdict = verdict_of(result)
    assert verdict.word == "not-slow" and "or to be proved so within" in verdict.why, verdict


def _recorded_and_compared(tmp_path, latency_ms: float, first_s: float, later_s: float):
    """(the comparison, its log, the recorded trace) of four threads faulting a 16 MiB checkpoint on a lab
    mount that keeps the page cache, after a sleep: ``first_s`` in the recorded run, ``later_s`` in every
    run after it (a warm run among them shows in its time)."""
    require(*ebpf_ready())
    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 16)[0], latency_ms=latency_ms,
                   keep_cache=True) as (mnt, path):
        file = f"{mnt}/{path.name}"
        marker = tmp_path / "ran-before"
        cmd = [sys.executable, "-c", f"import os, runpy, sys, time; time.sleep({later_s} if os.path.exists(sys.argv[2]) "
               f"else {first_s}); open(sys.argv[2], 'w').close(); sys.argv = ['load', '--pattern', 'mmap-threads', "
               "sys.argv[1]]; runpy.run_module('readtrace.workloads.load', run_name='__main__')", file, str(marker)]
        trace = _record(cmd, file, tmp_path / "load.rtrace")
        return (*_compare(cmd, file, trace), trace)
