"""Shared test helpers. Missing kernel/FUSE prerequisites skip locally but FAIL under CI=true."""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, why: str) -> None:
    """Skip (or, under CI, fail) the calling test when a prerequisite is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI: {why}", pytrace=False)
    pytest.skip(why)


def fuse_available() -> tuple[bool, str]:
    if not os.path.exists("/dev/fuse"):
        return False, "/dev/fuse missing"
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 missing (apt-get install fuse3)"
    return True, ""


@pytest.fixture
def need_fuse():
    ok, why = fuse_available()
    require(ok, why)


@pytest.fixture
def need_root():
    require(os.geteuid() == 0, "needs root")


@pytest.fixture
def disk_dir():
    """A directory on a disk-backed file system (tmp_path may be tmpfs elsewhere): its files can be
    made cold, and their pages paged out and fetched again."""
    import tempfile

    from readtrace.fs.knowledge import cold_cache_caveat
    from readtrace.fs.mounts import file_mount

    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        fstype = file_mount(d).fstype
        if cold_cache_caveat(fstype):
            pytest.skip(f"/var/tmp is on {fstype}: files there cannot be made cold")
        yield d


@pytest.fixture(scope="session")
def unprivileged_user():
    """A real unprivileged user (tests/unprivileged.py), created for the session and removed after.

    Needs root (useradd); skips locally, fails under CI=true without it."""
    require(os.geteuid() == 0, "creating a test user needs root")
    require(shutil.which("useradd") is not None, "useradd missing (apt-get install passwd)")
    from unprivileged import create_user, destroy_user

    user = create_user()
    try:
        yield user
    finally:
        destroy_user(user)


@contextlib.contextmanager
def lab_mount(tmp_path, fill, profile: str = "gcsfuse", **options):
    """The lab mount (the gcsfuse profile unless told) of a fresh tmp_path/src that ``fill(src)``
    populates; yields (mount point, what fill returned) and always unmounts."""
    from readtrace.simfs import force_unmount, mount

    require(*fuse_available())
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    made = fill(src)
    try:
        with mount(src, mnt, profile=profile, **options):
            yield mnt, made
    finally:
        force_unmount(mnt)


def recorded_lab_loads(tmp_path, size_mib: int, loaders: tuple[str, ...], **mount_options) -> dict:
    """Each of ``loaders`` (lab/loaders.py) reading a ``size_mib`` checkpoint through a lab mount
    (``mount_options``), recorded cold with the eBPF recorder (the backing file cold too: each load pays
    the mount alone) and analysed: {loader: Analysis}. Needs root."""
    from lab.loaders import LOADERS
    from readtrace.analyze import analyze
    from readtrace.pagecache.evict import evict
    from readtrace.record import record_command
    from readtrace.trace import load_trace
    from readtrace.workloads import make_checkpoint

    require(os.geteuid() == 0, "recording needs root")
    out = {}
    with lab_mount(tmp_path, lambda src: make_checkpoint(src, size_mib)[0], **mount_options) as (mnt, ck):
        for name in loaders:
            evict([str(ck)])
            command = LOADERS[name].command(mnt, tmp_path / f"{name}.digests")
            command[2] = str(mnt / ck.name)
            result = record_command(command, tmp_path / f"{name}.rtrace", quiet=True)
            out[name] = analyze(load_trace(result.trace_path))
    return out


def validate_fix_json(data: dict) -> dict:
    """``fix --compare --json`` output checked against its one schema (docs/fix-compare.schema.json)."""
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).parents[1] / "docs" / "fix-compare.schema.json").read_text())
    jsonschema.validate(data, schema)
    return data
