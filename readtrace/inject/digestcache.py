"""Digests of mapped tensors, taken once per comparison instead of once per run.

A tensor that is a lazy mapping of its checkpoint is digested from the file's own bytes (inject/loaded.py),
so every run of a comparison would read the whole file again past the page cache: on a mount at 20 ms
that is a second per 64 MiB on top of each run (rclone, transformers). The first run to digest a file
appends its digests (JSON lines) to ``mapped-digests.cache`` beside the run's manifest (the comparison's own work
directory), keyed by the file's identity (device, inode, size, mtime and ctime in ns); a later run reuses
them only while that identity is unchanged, so a file rewritten between runs is read again.
Standard library only: the shim imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CACHE_NAME = "mapped-digests.cache"  # not *.jsonl: that is a run's manifest


def cache_path(manifest: str | os.PathLike) -> Path:
    """Where the runs writing ``manifest`` keep their mapped tensors' digests: beside it."""
    return Path(manifest).parent / CACHE_NAME


def file_key(path: str) -> str | None:
    """The file's identity now (None: it cannot be stat'ed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def cached(cache: Path, key: str) -> dict[str, str]:
    """{tensor record name: sha256} digested from the file of identity ``key`` by an earlier run."""
    found: dict[str, str] = {}
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return found
    with open(fd, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
                if entry["key"] == key and isinstance(entry["sha256"], str):
                    found[str(entry["name"])] = entry["sha256"]
            except (ValueError, KeyError, TypeError):  # a torn or foreign line: digest again
                continue
    return found


def remember(cache: Path, key: str, digests: dict[str, str]) -> None:
    """Append ``digests`` of the file of identity ``key`` (one write, O_APPEND: safe from several
    processes). A cache that cannot be written only costs the next run the read."""
    data = "".join(json.dumps({"key": key, "name": name, "sha256": sha}) + "\n" for name, sha in digests.items())
    try:
        fd = os.open(cache, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        os.write(fd, data.encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def carry_over(cache: Path, from_key: str | None, to_key: str | None) -> None:
    """Keep the digests taken from the file of identity ``from_key`` (a local copy, fix/localcopy.py)
    for the file of identity ``to_key`` too: the caller checked that they hold the same bytes."""
    if from_key and to_key and from_key != to_key:
        known = cached(cache, to_key)
        found = {name: sha for name, sha in cached(cache, from_key).items() if name not in known}
        if found:
            remember(cache, to_key, found)
