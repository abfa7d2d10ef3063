"""Fail closed: readtrace's own work inside the user's process (the hook, early reads, prefetch,
patches, manifest writes) never breaks the user's program.

``guarded(what)`` wraps such work: an error in it is swallowed, noted once on stderr, and the run is
marked unproven in the manifest (a ``{"event": "unproven"}`` line, when the manifest can still be
written; the host also checks for a vanished or full work directory). The user's call then goes on
as it would have without readtrace. Errors of the user's own calls (a loader refusing a file) are
not ours: ``guarded`` only wraps readtrace's part. Standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading

_LOCK = threading.Lock()
_noted = False


def failed(what: str, error: BaseException) -> None:
    """Note that readtrace's ``what`` failed in this process: stderr once, the manifest when it can."""
    global _noted
    reason = f"readtrace's {what} failed in pid {os.getpid()} ({type(error).__name__}: {error})"
    with _LOCK:
        first, _noted = not _noted, True
    if first:
        with contextlib.suppress(Exception):  # no stderr left to say it on: the manifest line still may
            sys.stderr.write(f"readtrace: {reason}; the program goes on without it, this run is unproven\n")
    with contextlib.suppress(Exception):  # the manifest is what failed: the host sees it gone or short
        from readtrace.rerun.protocol import Rerun, append_manifest
        from readtrace.rerun.records import Unproven

        manifest = Rerun.from_env().manifest
        if manifest:
            append_manifest(manifest, [Unproven(reason=reason, pid=os.getpid())])


def guarded(what: str, default=None):
    """Decorator: run the function; on an error, ``failed(what, error)`` and return ``default``."""

    def wrap(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - fail closed: readtrace's part never breaks the program
                failed(what, e)
                return default

        return run

    return wrap
