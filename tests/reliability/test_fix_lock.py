"""Two `fix --compare` of the same checkpoint never measure at once: the second waits, said on stderr
with the holder's pid, or with --no-wait fails (issue 24: together they measured 3.11x and 0.97x for
a 5.29x fix, both exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import save_file

from readtrace import runstate
from readtrace.errors import ExitStatus
from readtrace.fix import coldlock

LEDGER = "import sys; from safetensors.torch import load_file; open(sys.argv[2], 'a').write('run\\n'); " \
         "print(len(load_file(sys.argv[1])))"


@pytest.fixture
def case(tmp_path, monkeypatch):
    monkeypatch.setenv(runstate.STATE_DIR_ENV, str(tmp_path / "state"))
    torch.manual_seed(6)
    ckpt = tmp_path / "model.safetensors"
    save_file({f"w{i}": torch.randn(64, 64) for i in range(3)}, ckpt)
    return ckpt, tmp_path / "ledger"


def _argv(ckpt, ledger, *extra):
    return [sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record", "--json", "--strategy", "prefetch",
            "--files", str(ckpt), *extra, "--", sys.executable, "-c", LEDGER, str(ckpt), str(ledger)]


def test_no_wait_fails_while_another_compare_holds_the_file(case):
    ckpt, ledger = case
    with coldlock.holding([str(ckpt)]):
        done = subprocess.run(_argv(ckpt, ledger, "--no-wait"), capture_output=True, text=True, timeout=600)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == ExitStatus.ERROR and "Traceback" not in done.stderr
    assert lines[0].startswith("readtrace: fix --compare runs the command 2 times") and len(lines) == 2
    assert f"another fix --compare (pid {os.getpid()}) is measuring {ckpt}" in lines[1] and "--no-wait" in lines[1]
    assert not ledger.exists()  # nothing ran


def test_a_second_compare_waits_for_the_first_then_runs(case):
    ckpt, ledger = case
    with coldlock.holding([str(ckpt)]):
        proc = subprocess.Popen(_argv(ckpt, ledger), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waiting = ""
        while "waiting" not in waiting:  # the wait is said before it blocks
            line = proc.stderr.readline()
            assert line, proc.stderr.read()
            waiting = line
        time.sleep(1.0)
        assert proc.poll() is None and not ledger.exists()  # it waits: nothing ran while we hold the file
        assert f"(pid {os.getpid()})" in waiting
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == ExitStatus.OK, err
    assert ledger.read_text().count("run") == 2


def test_two_real_compares_of_one_file_never_overlap(case):
    """Each run appends start/end to the ledger: the runs of two compares never interleave."""
    ckpt, ledger = case
    slow = ("import sys, time; from safetensors.torch import load_file; "
            "f = open(sys.argv[2], 'a'); f.write('start\\n'); f.flush(); load_file(sys.argv[1]); "
            "time.sleep(0.5); f.write('end\\n')")
    argv = [sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record", "--strategy", "prefetch",
            "--files", str(ckpt), "--", sys.executable, "-c", slow, str(ckpt), str(ledger)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    errs = [p.communicate(timeout=600)[1] for p in (first, second)]
    assert first.returncode == second.returncode == ExitStatus.OK, errs
    assert ledger.read_text().split() == ["start", "end"] * 4
    assert sum("waiting for it to finish" in e for e in errs) == 1
    assert list((ckpt.parent / "state").glob("cold-*.lock")) == []  # removed on release
