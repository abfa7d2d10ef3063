"""`fix --compare --plan` lists the runs and runs nothing; every compare says first how many times the
command runs, and it runs no more than that (issue 24: 4 runs for --repeat 1, side effects each time,
nothing said)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from readtrace.trace import write_trace

# Appends a line to a ledger (a side effect), then loads the checkpoint.
LEDGER = "import sys; from safetensors.torch import load_file; open(sys.argv[2], 'a').write('run\\n'); " \
         "print(len(load_file(sys.argv[1])))"


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(5)
    path = tmp_path / "model.safetensors"
    save_file({f"w{i}": torch.randn(64, 64) for i in range(3)}, path)
    return path


def fix(*args, cwd):
    return subprocess.run([sys.executable, "-m", "readtrace", "fix", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


def _count(text: str) -> tuple[int, bool]:
    found = re.search(r"runs (?:the command )?(up to )?(\d+) times", text)
    assert found, text
    return int(found.group(2)), found.group(1) is None


@pytest.mark.parametrize("extra", [[], ["--strategy", "both", "--repeat", "3"], ["--warm"]])
def test_plan_runs_nothing_and_says_how_many_runs(tmp_path, ckpt, extra):
    ledger = tmp_path / "ledger"
    done = fix("--compare", "--plan", *extra, "--", sys.executable, "-c", LEDGER, str(ckpt), str(ledger),
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not ledger.exists() and done.stderr == ""
    assert "nothing was run" in done.stdout and "discovery" in done.stdout
    most, exact = _count(done.stdout)
    assert exact == (extra != [])
    steps = re.findall(r"^\s+\d+\. ", done.stdout, re.M)
    assert most == (len(steps) if exact else 13)


def test_plan_of_a_trace_names_its_command_and_owner_without_running_it(tmp_path):
    trace = write_trace(tmp_path / "t.rtrace", meta={"command": ["sh", "-c", "id > pwned"], "cwd": str(tmp_path)})
    done = fix("--compare", "--plan", str(trace), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sh -c 'id > pwned'" in done.stdout and "(owner " in done.stdout and "discovery" not in done.stdout
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("extra", [["--strategy", "prefetch", "--repeat", "2"], []])
def test_a_compare_says_first_how_many_runs_and_keeps_to_it(tmp_path, ckpt, extra):
    ledger = tmp_path / "ledger"
    done = fix("--compare", "--no-record", "--files", str(ckpt), *extra, "--", sys.executable, "-c", LEDGER,
               str(ckpt), str(ledger), cwd=tmp_path)
    assert done.returncode in (0, 6), done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("readtrace: fix --compare runs the command") and "side effects" in first
    most, exact = _count(first)
    runs = len(ledger.read_text().splitlines())
    assert runs == most if exact else 2 <= runs <= most
    assert exact == bool(extra) and (most == 4 if exact else most == 12)  # --files: no discovery run
