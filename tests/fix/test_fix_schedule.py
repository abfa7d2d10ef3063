"""auto's schedule on real loads (safe_open + 4 threads) on the lab mount (gcsfuse profile, 20 ms): the
candidates run fastest predicted first (the prediction in the JSON), a trial that falls behind the best
is stopped (its whole process tree) and said so, --budget leaves candidates "not tried", and every
JSON agrees with its schema and with the exit code."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from conftest import lab_mount, validate_fix_json

from readtrace.fix.compare import compare
from readtrace.fix.compare_report import render_table, to_json
from readtrace.workloads import make_checkpoint

# Deliberately slow under one lever (OMP_NUM_THREADS=1): it says its pid, then sleeps before loading.
# Every run from the mount first waits 1 s and reads 16 spans of the file backwards (~0.35 s of first
# bytes at 20 ms: longer than a sequential read of it, so the recorded run is not at its floor), which
# the floor's warm run, from a local copy bound over the file (fix/localcopy.py, another device than
# the file's directory), does not: no candidate reaches the floor, so each one runs.
LOAD = """
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
from safetensors import safe_open
if os.stat(sys.argv[1]).st_dev == os.stat(os.path.dirname(sys.argv[1])).st_dev:
    time.sleep(1)
    fd = os.open(sys.argv[1], os.O_RDONLY)
    for offset in range(os.fstat(fd).st_size - (64 << 10), 0, -(512 << 10)):
        os.pread(fd, 64 << 10, offset)
    os.close(fd)
if os.environ.get("OMP_NUM_THREADS") == "1" and len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
with safe_open(sys.argv[1], "pt") as f:
    keys = list(f.keys())
    with ThreadPoolExecutor(4) as pool:
        state = dict(zip(keys, pool.map(f.get_tensor, keys)))
print(len(state))
"""


@pytest.fixture
def dropping_lab(tmp_path):
    """8 MiB behind the lab mount at 20 ms, every open drops the page cache."""
    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 8)[0], latency_ms=20, keep_cache=False) as (mnt, path):
        (tmp_path / "load.py").write_text(LOAD)
        yield tmp_path, f"{mnt}/{path.name}"


def fix_compare(tmp_path, ckpt: str, *options: str, extra: tuple[str, ...] = ()) -> tuple[dict, str, int]:
    """``readtrace fix --compare --json OPTIONS --files CKPT -- python load.py CKPT EXTRA``: (JSON, stderr, exit)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--json", *options, "--files", ckpt,
                          "--", sys.executable, str(tmp_path / "load.py"), ckpt, *extra],
                         capture_output=True, text=True, timeout=300, env=env)
    data = validate_fix_json(json.loads(out.stdout))
    assert out.returncode == data["exit_code"], out.stderr  # the JSON agrees with the exit code
    return data, out.stderr, out.returncode


@pytest.mark.fuse
@pytest.mark.ebpf
def test_candidates_run_fastest_predicted_first_and_say_the_prediction(dropping_lab, need_root):
    """Recorded: the baseline's trace predicts each candidate; the JSON lists them in that order. The load
    reads every 64 KiB span of its file backwards (128 first bytes at 20 ms), so that even the floor with
    the recorded run's own time for its warm run is far under it: out of the not-slow band, the floor's
    warm run is made and the candidates are listed (within it, a --budget of 1 s buys no proof, so not
    even the warm run would be made: test_fix_auto)."""
    tmp_path, ckpt = dropping_lab
    (tmp_path / "load.py").write_text(LOAD.replace("-(512 << 10)", "-(64 << 10)"))
    data, _, code = fix_compare(tmp_path, ckpt, "--budget", "1")
    cands = data["choice"]["candidates"]
    # left alone (nothing fit the --budget): nothing changed ran, so nothing was compared
    assert code == 0 and data["left_alone"] and data["tensors"] > 0 and data["tensors_identical"] is None
    assert [c["status"] for c in cands] == ["not tried"] * len(cands) and len(cands) >= 3
    predicted = [c["predicted_s"] for c in cands]
    known = [p for p in predicted if p is not None]
    assert known == sorted(known) and predicted[:len(known)] == known  # the unmodelled ones last
    by_label = {c["label"]: c for c in cands}
    # one in-order reader is modelled (from this mount's recorded costs); OMP_NUM_THREADS changes no read
    assert by_label["readtrace own-fd"]["predicted_s"] > 0
    assert by_label["readtrace own-fd"]["predicted_by"].startswith("what-if model (gcsfuse, ")
    assert by_label["lever omp-1"]["predicted_s"] == pytest.approx(data["baseline"]["wall_s"])
    assert by_label["lever safetensors-pread"]["predicted_s"] is None


@pytest.mark.fuse
def test_a_trial_slower_than_the_best_is_stopped_and_said_so(dropping_lab):
    tmp_path, ckpt = dropping_lab
    pid_file = tmp_path / "slow.pid"
    data, _, code = fix_compare(tmp_path, ckpt, "--no-record", extra=(str(pid_file),))
    cands = {c["label"]: c for c in data["choice"]["candidates"]}
    slow = cands["lever omp-1"]
    assert slow["status"] == "stopped" and slow["tensors_identical"] is None and slow["exit_code"] != 0
    trials = [c for c in cands.values() if c["status"] == "measured" and not c["label"].endswith("(again)")]
    baseline = max(data["baseline"]["wall_s"], *(r["wall_s"] for r in data["baseline"]["runs"]))
    limits = [baseline]  # past 97 % (91 % in the not-slow band of the floor) of the baseline no trial can be the fix
    reasons = ["(not 3 % faster than the baseline's ", "(not 9 % faster than the baseline's "]
    if trials:  # omp-1 runs last here (no predictions): the best before it, where one ran to its end
        best = min(c["wall_s"] for c in trials)
        fastest = next(c["label"] for c in trials if c["wall_s"] == best)
        limits.append(1.25 * best + 0.5)
        reasons.append(f"(slower than {fastest} {best:.2f} s)")
    assert slow["why"].startswith("stopped at ") and any(r in slow["why"] for r in reasons), slow["why"]
    assert slow["wall_s"] < min(limits) + 5  # stopped at its limit (+ the grace), not after 120 s
    assert not os.path.exists(f"/proc/{pid_file.read_text()}")  # its process is gone, not left sleeping
    assert data["verdict"] != "unproven" and all(c["tensors_identical"] for c in trials)
    assert data["tensors_identical"] is (None if data["left_alone"] else True)
    assert data["choice"]["chosen"] != "lever omp-1" and code == 0


@pytest.mark.fuse
def test_budget_leaves_candidates_not_tried_in_json_and_table(dropping_lab):
    tmp_path, ckpt = dropping_lab
    lines: list[str] = []
    result = compare([sys.executable, str(tmp_path / "load.py"), ckpt], files=[ckpt], budget=0.5, log=lines.append)
    data = validate_fix_json(to_json(result))
    cands = data["choice"]["candidates"]
    assert cands and all(c["status"] == "not tried" and "--budget" in c["why"] for c in cands)
    assert data["left_alone"] is True and data["speedup"] is None and data["exit_code"] == 0
    assert data["verdict"] in ("not-slow", "slow-no-fix") and f"{len(cands)} not tried" in data["why"]
    assert len(data["baseline"]["runs"]) == 1 and data["fixed"]["runs"] == []  # nothing else ran
    out = io.StringIO()
    render_table(result, out)
    assert "    not tried readtrace own-fd" in out.getvalue() and "--budget: " in out.getvalue()
    assert lines[0].startswith("floor: ")  # first: its warm run's digests serve the cold runs after it
    assert lines[1].startswith("run 1 baseline [unchanged] (cold: 1 file(s) evicted); ") and "s elapsed" in lines[1]


def test_a_trial_that_can_no_longer_gain_over_the_baseline_is_stopped_there():
    """Before any candidate finished, the limit is the baseline's: a trial past 97 % of it (plus the
    digest time the stop clock counts) can no longer be the fix; after one finished, the lower limit."""
    from readtrace.fix.candidates import LEAVE_ALONE
    from readtrace.fix.predict import Ranked
    from readtrace.fix.schedule import Budget, run_trials

    limits, walls = [], iter([None, 4.0, None])  # stopped, finished in 4 s, stopped

    class Trial:
        def __init__(self, wall):
            self.wall_s, self.exit_code = wall or 0.0, 0 if wall else -15
            self.stopped = "" if wall else "stopped at 9.7 s"
            self.label = "x"

    def run(row, limit_s, expect_s, left_s):
        limits.append(limit_s)
        return Trial(next(walls))

    rows = [Ranked(LEAVE_ALONE, None, "") for _ in range(3)]
    out = run_trials(rows, 10.0, None, Budget(None), run, lambda t: True, digest_s=0.5)
    assert limits == [pytest.approx(10.2), pytest.approx(10.2), pytest.approx(5.5)]
    assert out.trials[0].stopped == "stopped at 9.7 s (not 3 % faster than the baseline's 10.00 s: it cannot be the fix)"
    assert out.trials[2].stopped.endswith("(slower than x 4.00 s)")


def test_plan_says_at_most_and_how_it_orders(tmp_path):
    out = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--plan", "--budget", "60", "--",
                          sys.executable, "load.py", "model.safetensors"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "runs up to " in out.stdout and "fastest predicted first" in out.stdout
    assert "--budget 60 s" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--budget", "0", "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "readtrace: --budget must be a positive number of seconds, not 0"]
    other = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--strategy", "prefetch",
                            "--budget", "9", "--", "true"], capture_output=True, text=True, timeout=60)
    assert other.returncode == 2 and "--budget caps the candidates of fix --compare --strategy auto" in other.stderr


def test_in_the_band_a_trial_that_missed_its_prediction_corrects_the_rest():
    """In the not-slow band (margin 1/1.10) a trial that took 0.5 s over its prediction and did not get
    under 91 % of the baseline rules out the candidates whose prediction + 0.5 s is over it; one whose
    corrected prediction still gets there runs. Out of the band (3 %) every candidate runs."""
    from readtrace.fix.candidates import SLOW_MARGIN, Candidate
    from readtrace.fix.predict import Ranked
    from readtrace.fix.schedule import Budget, run_trials

    class Trial:
        def __init__(self, label, wall):
            self.label, self.wall_s, self.exit_code, self.stopped = label, wall, 0, ""

    walls = {"a": 3.9, "b": 3.95, "c": 3.0}
    rows = [Ranked(Candidate(n, "none", ""), p, "model") for n, p in (("a", 3.4), ("b", 3.5), ("c", 3.2))]

    def run(row, limit_s, expect_s, left_s):
        return Trial(row.candidate.label, walls[row.candidate.label])

    band = run_trials(rows, 4.2, None, Budget(None), run, lambda t: True, margin=1 / SLOW_MARGIN)
    assert [t.label for t in band.trials] == ["a", "c"]  # need 3.82 s: b at 3.5 + 0.5 s is over, c at 3.7 s not
    (b,) = band.not_tried
    assert b.label == "b" and b.predicted_s == 3.5
    assert b.why == ("predicted at 3.50 s, but a took 3.90 s against its 3.40 s predicted: 0.50 s later, so 4.00 s, "
                     "over the 3.82 s a fix must take")
    out = run_trials(rows, 4.2, None, Budget(None), run, lambda t: True)  # out of the band: a is the best so far
    assert [t.label for t in out.trials] == ["a", "c"]  # b at 3.5 + 0.5 s is not 3 % under a's 3.90 s, c at 3.7 s is
    assert out.not_tried[0].why.endswith("so 4.00 s, not 3 % faster than a (3.90 s)")


def test_once_one_is_measured_the_rest_run_only_where_predicted_to_beat_it_by_the_models_own_miss():
    """The first trial ran 1.34 s where 1.67 s was predicted (0.33 s sooner): a candidate predicted at
    1.67 s (so 1.34 s) cannot beat it by 3 %, nor one at the baseline's time; one predicted at 1.60 s
    (1.27 s) can, and runs; one the model does not replay runs too (last), and a stopped or failed
    trial corrects nothing."""
    from readtrace.fix.candidates import Candidate
    from readtrace.fix.predict import Ranked
    from readtrace.fix.schedule import Budget, run_trials

    class Trial:
        def __init__(self, label, wall, code=0):
            self.label, self.wall_s, self.exit_code, self.stopped = label, wall, code, ""

    walls = {"prefetch": (1.34, 0), "both": (1.4, 0), "quick": (1.31, 0), "lever": (1.5, 0), "broken": (0.2, 1)}
    predicted = (("broken", 1.0), ("prefetch", 1.67), ("both", 1.67), ("quick", 1.60), ("omp", 5.9), ("lever", None))
    rows = [Ranked(Candidate(n, "none", ""), p, "model") for n, p in predicted]
    out = run_trials(rows, 5.9, None, Budget(None), lambda row, *_: Trial(row.candidate.label,
                                                                         *walls[row.candidate.label]), lambda t: True)
    assert [t.label for t in out.trials] == ["broken", "prefetch", "quick", "lever"]
    why = {n.label: n.why for n in out.not_tried}
    assert set(why) == {"both", "omp"}
    assert why["both"] == ("predicted at 1.67 s, but prefetch took 1.34 s against its 1.67 s predicted: 0.33 s sooner, "
                           "so 1.34 s, not 3 % faster than prefetch (1.34 s)")
    assert why["omp"].endswith("so 5.57 s, not 3 % faster than quick (1.31 s)")  # the best by then
