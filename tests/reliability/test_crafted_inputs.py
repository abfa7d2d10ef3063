"""Issue 24: crafted or damaged inputs of every kind readtrace reads give their documented exit code and
one line on stderr: never a traceback, never a hang (every case runs under a timeout)."""

from __future__ import annotations

import pytest

from readtrace.errors import ExitStatus
from reliability.conftest import one_line, readtrace


@pytest.mark.parametrize("src, mnt", [("d", "d"), ("d", "d/sub"), ("d/sub", "d"), ("d", "link")],
                         ids=["same", "mnt-inside-src", "src-inside-mnt", "mnt-links-to-src"])
def test_simfs_refuses_overlapping_source_and_mount_point(need_fuse, tmp_path, leftovers, src, mnt):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "d")
    p = readtrace(["simfs", src, mnt], cwd=tmp_path, env=leftovers.env, timeout=60)
    assert p.returncode == ExitStatus.USAGE, p.stderr
    assert "overlap" in one_line(p.stderr)
