"""Under sudo, `fix -- CMD` and `fix --compare -- CMD` run CMD as the invoking user (uid, gid, groups,
HOME), as `record` does, and the comparison's work directory is theirs to write (issue 24: CMD ran as
root with HOME=/root; the compare failed on its own work dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from safetensors.torch import save_file

from readtrace.errors import ExitStatus

READTRACE = [sys.executable, "-m", "readtrace"]
# Appends who ran it to a ledger, then loads the checkpoint through safetensors (the shim sees it).
WHO = """
import json, os, sys
from safetensors.torch import load_file
with open(sys.argv[2], "a") as f:
    f.write(json.dumps([os.getuid(), os.getgid(), sorted(os.getgroups()), os.environ["HOME"]]) + "\\n")
print(len(load_file(sys.argv[1])), "tensors")
"""


def _as_sudo(user) -> dict:
    """What sudo sets for a command run by ``user``, on top of an environment that can run this checkout."""
    return {**user.env(), "SUDO_UID": str(user.uid), "SUDO_GID": str(user.gid), "SUDO_USER": user.name,
            "HOME": "/root", "USER": "root", "LOGNAME": "root"}


def _expected(user) -> list:
    return [user.uid, user.gid, sorted(os.getgrouplist(user.name, user.gid)), str(user.home)]


def _setup(user, name: str):
    home = user.home / name
    user.run(["mkdir", "-p", str(home)], check=True)
    script, ckpt, ledger = home / "who.py", home / "model.safetensors", home / "ledger.jsonl"
    user.run(["sh", "-c", f"cat > {script}"], input=WHO, check=True)
    torch.manual_seed(3)
    save_file({f"w{i}": torch.randn(64, 64) for i in range(3)}, ckpt)
    os.chown(ckpt, user.uid, user.gid)
    return script, ckpt, ledger


def test_plain_fix_runs_the_command_as_the_invoking_user(unprivileged_user):
    user = unprivileged_user
    script, ckpt, ledger = _setup(user, "plain")
    done = subprocess.run([*READTRACE, "fix", "--", user.python, str(script), str(ckpt), str(ledger)],
                          cwd="/", env=_as_sudo(user), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3 tensors"
    assert [json.loads(line) for line in ledger.read_text().splitlines()] == [_expected(user)]


def test_compare_runs_every_run_as_the_invoking_user_in_a_work_dir_of_theirs(unprivileged_user):
    user = unprivileged_user
    script, ckpt, ledger = _setup(user, "compare")
    keep = user.home / "compare" / "runs"
    done = subprocess.run([*READTRACE, "fix", "--compare", "--no-record", "--json", "--strategy", "prefetch",
                           "--files", str(ckpt), "--keep", str(keep), "--", user.python, str(script), str(ckpt),
                           str(ledger)], cwd="/", env=_as_sudo(user), capture_output=True, text=True, timeout=600)
    assert done.returncode == ExitStatus.OK, done.stderr
    assert json.loads(done.stdout)["tensors_identical"] is True
    runs = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert runs == [_expected(user)] * 2  # baseline and fixed, both as the user
    assert keep.stat().st_uid == user.uid
    manifests = sorted(keep.glob("*.jsonl"))
    assert len(manifests) == 2 and all(m.stat().st_uid == user.uid for m in manifests)
