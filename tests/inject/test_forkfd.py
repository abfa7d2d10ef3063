"""The own-fd-per-fork fix (readtrace.inject.forkfd): a forked worker's read-only fds on the
checkpoint get an open file description of their own, offset and close-on-exec kept; every other fd
is left exactly as it was. Real fds, real forks, real multiprocessing pools through the rerun's
sitecustomize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from readtrace.inject.forkfd import identities, open_on, reopen, reopen_all
from readtrace.inject.manifest import read_manifest
from readtrace.rerun.environment import shim_environment


def same_description(a: int, b: int) -> bool:
    """Do fds ``a`` and ``b`` share one open file description? (Moving one's offset moves the other's.)"""
    before = os.lseek(b, 0, os.SEEK_CUR)
    os.lseek(a, before + 1, os.SEEK_SET)
    shared = os.lseek(b, 0, os.SEEK_CUR) == before + 1
    os.lseek(a, before, os.SEEK_SET)
    return shared


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(os.urandom(1 << 16))
    return str(path)


def test_reopen_keeps_offset_and_cloexec_and_gets_its_own_description(ckpt):
    for inheritable in (False, True):
        fd = os.open(ckpt, os.O_RDONLY)
        os.set_inheritable(fd, inheritable)
        os.lseek(fd, 1234, os.SEEK_SET)
        twin = os.dup(fd)  # stands for the parent's copy of the fd: shares the description before
        try:
            assert same_description(fd, twin)
            assert reopen(fd, ckpt)
            assert not same_description(fd, twin)  # its own description now
            assert os.lseek(fd, 0, os.SEEK_CUR) == 1234
            assert os.get_inheritable(fd) is inheritable
            with open(ckpt, "rb") as f:
                f.seek(1234)
                assert os.read(fd, 100) == f.read(100)
        finally:
            os.close(fd)
            os.close(twin)


def test_reopen_leaves_other_fds_alone(ckpt, tmp_path):
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * 100)
    files = identities([ckpt])
    write_only = os.open(ckpt, os.O_WRONLY)
    read_write = os.open(ckpt, os.O_RDWR)
    pipe_r, pipe_w = os.pipe()
    other_fd = os.open(other, os.O_RDONLY)
    mine = os.open(ckpt, os.O_RDONLY)
    twins = {fd: os.dup(fd) for fd in (write_only, read_write, other_fd, mine)}
    try:
        found = dict(open_on(files))
        assert mine in found and found[mine] == ckpt
        assert not {write_only, read_write, pipe_r, pipe_w, other_fd} & set(found)
        assert not reopen(write_only, ckpt) and not reopen(read_write, ckpt) and not reopen(pipe_r, ckpt)
        assert dict(reopen_all(files)) == {mine: ckpt, twins[mine]: ckpt}
        for fd in (write_only, read_write, other_fd):
            assert same_description(fd, twins[fd])  # untouched
        assert not same_description(mine, twins[mine])
    finally:
        for fd in (write_only, read_write, pipe_r, pipe_w, other_fd, mine, *twins.values()):
            os.close(fd)


def test_a_path_that_now_names_another_file_leaves_the_fd_alone(ckpt, tmp_path):
    fd = os.open(ckpt, os.O_RDONLY)
    twin = os.dup(fd)
    try:
        replacement = tmp_path / "new.safetensors"
        replacement.write_bytes(b"y" * 10)
        os.replace(replacement, ckpt)  # a new checkpoint under the old name: other dev/ino
        assert not reopen(fd, ckpt)
        assert same_description(fd, twin)
        assert os.pread(fd, 4, 0) != b"yyyy"
    finally:
        os.close(fd)
        os.close(twin)


POOL = textwrap.dedent("""
    import os, sys, json
    from multiprocessing import get_context
    FD = os.open(sys.argv[1], os.O_RDONLY)
    os.lseek(FD, 7, os.SEEK_SET)

    def probe(_):
        import time
        time.sleep(0.2)  # every worker is alive at once: the parent's offset must not move with theirs
        at = os.lseek(FD, 0, os.SEEK_CUR)
        os.lseek(FD, 1000 + os.getpid() % 1000, os.SEEK_SET)
        return at, os.get_inheritable(FD), os.pread(FD, 8, 0).hex()

    if __name__ == "__main__":
        with get_context(sys.argv[2]).Pool(3) as pool:
            got = pool.map(probe, range(3))
        print(json.dumps({"workers": got, "parent": os.lseek(FD, 0, os.SEEK_CUR)}))
""")


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_pool_workers_get_their_own_description(ckpt, tmp_path, context):
    """Through the rerun's sitecustomize: fork workers reopen the inherited fd (noted in the
    manifest); spawn and forkserver workers run the script's top level themselves (their own open)."""
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    manifest = tmp_path / "m.jsonl"
    with shim_environment("own-fd-per-fork", manifest, files=(ckpt,)) as env:
        out = subprocess.run([sys.executable, str(script), ckpt, context], env=env, capture_output=True,
                             text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    with open(ckpt, "rb") as f:
        head = f.read(8).hex()
    assert got["parent"] == 7  # the workers' seeks moved their own descriptions, not the parent's
    for _at, inheritable, data in got["workers"]:
        assert data == head and inheritable is False
    notes = [c for c in read_manifest(manifest).calls if c.call == "fork:shared-fd"]
    if context == "fork":
        assert len({c.pid for c in notes}) == 3 and all(c.reopened for c in notes)
    else:
        assert not any(c.file == ckpt for c in notes)  # nothing inherited: nothing to do


def test_baseline_notes_shared_fds_without_touching_them(ckpt, tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    manifest = tmp_path / "m.jsonl"
    with shim_environment("none", manifest, files=(ckpt,)) as env:
        out = subprocess.run([sys.executable, str(script), ckpt, "fork"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = [c for c in read_manifest(manifest).calls if c.call == "fork:shared-fd"]
    assert len({c.pid for c in notes}) == 3 and not any(c.reopened for c in notes)
    assert all(c.file == ckpt for c in notes)
    assert json.loads(out.stdout)["parent"] != 7  # shared: a worker's seek moved the parent's offset


def test_discovery_names_the_shared_file(ckpt, tmp_path):
    """Without the checkpoint files given (fix --compare's discovery run), any read-only regular
    file a forked worker inherited is named."""
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    manifest = tmp_path / "m.jsonl"
    with shim_environment("none", manifest) as env:
        out = subprocess.run([sys.executable, str(script), ckpt, "fork"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ckpt in {c.file for c in read_manifest(manifest).calls if c.call == "fork:shared-fd"}


NESTED = textwrap.dedent("""
    import os, subprocess, sys
    FD = os.open(sys.argv[1], os.O_RDONLY)
    os.lseek(FD, 7, os.SEEK_SET)
    # a Python child exec'd with the fd (made inheritable and passed): its sitecustomize reopens it
    os.set_inheritable(FD, True)
    subprocess.run([sys.executable, "-c", f"import os; os.lseek({FD}, 99, os.SEEK_SET)"], pass_fds=(FD,), check=True)
    exec_kept = os.lseek(FD, 0, os.SEEK_CUR) == 7
    pid = os.fork()
    if pid == 0:  # a worker that forks again: the grandchild reopens the worker's description too
        g = os.fork()
        if g == 0:
            os.lseek(FD, 55, os.SEEK_SET)
            os._exit(0)
        os.waitpid(g, 0)
        os._exit(0 if os.lseek(FD, 0, os.SEEK_CUR) == 7 else 3)
    nested_kept = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    print(exec_kept, nested_kept, os.lseek(FD, 0, os.SEEK_CUR) == 7)
""")


def test_exec_children_and_grandchildren_get_their_own_description(ckpt, tmp_path):
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    with shim_environment("own-fd-per-fork", tmp_path / "m.jsonl", files=(ckpt,)) as env:
        out = subprocess.run([sys.executable, str(script), ckpt], env=env, capture_output=True, text=True,
                             timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]
    notes = [c for c in read_manifest(tmp_path / "m.jsonl").calls if c.call == "fork:shared-fd"]
    assert {c.when for c in notes} == {"exec", "fork"} and all(c.reopened for c in notes)


def test_plain_fix_without_files_reopens_any_inherited_read_only_file(ckpt, tmp_path):
    """`readtrace fix --strategy own-fd-per-fork -- CMD` (no --compare, no files named): the strategy
    asked for by name reopens every read-only regular file a forked worker inherited."""
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    with shim_environment("own-fd-per-fork", None) as env:
        out = subprocess.run([sys.executable, str(script), ckpt, "fork"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["parent"] == 7
