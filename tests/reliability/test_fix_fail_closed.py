"""Issue 24: the user's load never breaks because of readtrace. What readtrace does inside the user's
process (manifest writes, early reads, prefetch, patches) fails closed: the load goes on as it would
without readtrace, and `fix --compare` reports the run unproven (exit 6), never a crash.
"""

from __future__ import annotations

import sys

import pytest
from conftest import require
from workloads import ebpf_ready

from readtrace.errors import ExitStatus
from reliability.conftest import readtrace, tmpfs_at

# Loads the checkpoint twice; between the loads, in the fixed run only, readtrace's manifest directory
# disappears (``gone``) or its file system fills up (``full``). Its own result goes to result-SIDE.
LOAD = """import errno, os, shutil, sys
from safetensors.torch import load_file
how, ckpt = sys.argv[1], sys.argv[2]
first = load_file(ckpt)
manifest = os.environ.get("READTRACE_MANIFEST", "")
side = "fixed" if "fixed" in os.path.basename(manifest) else "other"
if side == "fixed" and how == "gone":
    shutil.rmtree(os.path.dirname(manifest))
if side == "fixed" and how == "full":
    with open(os.path.join(os.path.dirname(manifest), "filler"), "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
second = load_file(ckpt)
total = sum(float(t.sum()) for t in second.values())
with open(f"result-{side}-{os.getpid()}", "w") as f:
    f.write(repr(total))
"""


@pytest.fixture
def checkpoint(tmp_path):
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file({f"w{i}": torch.randn(64, 64) for i in range(8)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "load.py").write_text(LOAD)
    return tmp_path / "model.safetensors"


def _results(tmp_path, side: str) -> list[str]:
    return [p.read_text() for p in tmp_path.glob(f"result-{side}-*")]


@pytest.fixture
def tiny_fs(tmp_path, need_root):
    """A 2 MiB tmpfs at tmp_path/keep, unmounted after."""
    with tmpfs_at(tmp_path / "keep", "size=2m,mode=0755") as keep:
        yield keep


@pytest.mark.parametrize("strategy, recorded", [("own-fd", False), ("prefetch", False),
                                               pytest.param("own-fd", True, marks=pytest.mark.ebpf)],
                         ids=["own-fd", "prefetch", "own-fd-recorded"])
def test_the_work_directory_disappears_mid_run(tmp_path, leftovers, checkpoint, strategy, recorded):
    if recorded:
        require(*ebpf_ready())
    plain = [] if recorded else ["--no-record"]
    p = readtrace(["fix", "--compare", *plain, "--strategy", strategy, "--files", checkpoint, "--",
                   sys.executable, "load.py", "gone", checkpoint], cwd=tmp_path, env=leftovers.env, timeout=300)
    assert p.returncode == ExitStatus.NO_EVIDENCE, p.stderr
    assert "Traceback" not in p.stderr
    assert "disappeared during the fixed run 1" in p.stderr.strip().splitlines()[-1]
    fixed, other = _results(tmp_path, "fixed"), _results(tmp_path, "other")
    assert len(fixed) == 1 and other and set(other) == set(fixed), "the user's load did not finish as without readtrace"


def test_the_manifest_file_system_fills_up_mid_run(tmp_path, leftovers, checkpoint, tiny_fs):
    p = readtrace(["fix", "--compare", "--no-record", "--strategy", "own-fd", "--keep", tiny_fs, "--files",
                   checkpoint, "--", sys.executable, "load.py", "full", checkpoint],
                  cwd=tmp_path, env=leftovers.env, timeout=300)
    assert p.returncode == ExitStatus.NO_EVIDENCE, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "nothing proven: fixed run 1:" in last and ("is full" in last or "cut off" in last), last
    fixed, other = _results(tmp_path, "fixed"), _results(tmp_path, "other")
    assert len(fixed) == 1 and other and set(other) == set(fixed), "the user's load did not finish as without readtrace"


def test_the_user_s_sitecustomize_runs_once_per_process(tmp_path, leftovers):
    site = tmp_path / "site"
    site.mkdir()
    ledger = tmp_path / "ledger"
    (site / "sitecustomize.py").write_text(f"import os\nwith open({str(ledger)!r}, 'a') as f:\n"
                                           "    f.write(f'{os.getpid()}\\n')\n")
    env = {**leftovers.env, "PYTHONPATH": str(site)}
    p = readtrace(["fix", "--strategy", "own-fd", "--", sys.executable, "-c", "print('ran')"],
                  cwd=tmp_path, env=env)
    assert p.returncode == 0 and "ran" in p.stdout, p.stderr
    pids = ledger.read_text().split()
    assert len(pids) == 2, pids  # readtrace itself (its PYTHONPATH has it too), and the command
    assert len(set(pids)) == len(pids), f"a process ran the user's sitecustomize twice: {pids}"


LOAD_AND_EXIT = """import sys
from safetensors.torch import load_file
print("loaded", len(load_file(sys.argv[1])), flush=True)
sys.exit(int(sys.argv[2]))
"""


def test_the_shim_failing_to_patch_leaves_the_load_as_it_was(tmp_path, leftovers, checkpoint):
    """A chunk size the shim cannot use (READTRACE_CHUNK_MB, kept from the user's environment) makes
    patching the loader fail inside the command: the load runs unpatched, with its own exit code."""
    (tmp_path / "load_exit.py").write_text(LOAD_AND_EXIT)
    env = {**leftovers.env, "READTRACE_CHUNK_MB": "1e308"}  # finite, but no chunk size in bytes
    p = readtrace(["fix", "--strategy", "own-fd", "--", sys.executable, "load_exit.py", checkpoint, "3"],
                  cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 3 and "loaded 8" in p.stdout, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("patch of a loader module failed") == 1, p.stderr
    p = readtrace(["fix", "--compare", "--no-record", "--strategy", "own-fd", "--files", checkpoint, "--",
                   sys.executable, "load_exit.py", checkpoint, "0"], cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == ExitStatus.NO_EVIDENCE and "Traceback" not in p.stderr, p.stderr
    assert "patch of a loader module failed" in p.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize("name", ["READTRACE_CHUNK_MB", "READTRACE_THREADS", "READTRACE_PREFETCH_PIN_S"])
def test_a_tuning_no_setting_means_keeps_its_default(name, value):
    from readtrace.rerun.protocol import Rerun

    assert Rerun.from_env({name: value}) == Rerun()


def test_a_pin_held_longer_than_a_timer_can_wait_is_no_traceback(tmp_path, leftovers, checkpoint):
    (tmp_path / "load_exit.py").write_text(LOAD_AND_EXIT)
    env = {**leftovers.env, "READTRACE_PREFETCH_PIN_S": "1e308"}
    p = readtrace(["fix", "--strategy", "both", "--files", checkpoint, "--", sys.executable, "load_exit.py",
                   checkpoint, "0"], cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0 and "loaded 8" in p.stdout and "Traceback" not in p.stderr, p.stderr
