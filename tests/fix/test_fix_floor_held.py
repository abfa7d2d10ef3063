"""The floor's warm run is warm: the files it reads stay cached until it ends, whatever reclaims cold pages.

This VM runs a DAMON `pageout` scheme that drops page cache nobody touched for seconds
(readtrace.pagecache.pin); a warm run that found its pages gone fetched them again from the mount and
made the floor slower than the load warm. The command pages its file out itself, through the kernel's
reclaim_pages() that kdamond uses (MADV_PAGEOUT, as tests/pagecache/test_fix_pin.py), before it reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import lab_mount

from readtrace.fix.session import Session

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("need_root")]

PAGED_OUT_THEN_COUNTED = """
import mmap, sys
from readtrace.pagecache.residency import cached_pages
with open(sys.argv[1], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
    sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
    mapped.madvise(getattr(mmap, "MADV_PAGEOUT", 21))
cached, total = cached_pages(sys.argv[1])
with open(sys.argv[2], "w") as out:
    out.write(f"{cached} {total}")
"""


@pytest.mark.parametrize("cold", [True, False], ids=["floor", "warm-comparison-run"])
def test_the_warm_runs_pages_survive_reclaim_until_it_ends(tmp_path, cold):
    with lab_mount(tmp_path, lambda src: (src / "w.bin").write_bytes(os.urandom(8 << 20)), latency_ms=0,
                   keep_cache=True) as (mnt, _):
        file, seen = str(mnt / "w.bin"), tmp_path / "seen"
        work = tmp_path / "work"
        work.mkdir()
        lines = []
        session = Session([sys.executable, "-c", PAGED_OUT_THEN_COUNTED, file, str(seen)], work, None, None, None,
                          [file], cold, lines.append)
        if cold:
            floor, warm, why = session.floor(keeps_cache=True)
            assert floor is not None and warm.exit_code == 0, why
        else:
            with session.prepared("a warm run"):
                subprocess.run(session.command, check=True, timeout=60)
        cached, total = map(int, seen.read_text().split())
        assert total == 2048 and cached == total, lines  # nothing the command paged out left the cache
        assert not any("not pinned" in line for line in lines), lines
