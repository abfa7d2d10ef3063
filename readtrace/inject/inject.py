"""The environment that injects the shim into an unchanged command: a sitecustomize on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import readtrace
from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.fix.strategies import STRATEGIES
from readtrace.inject import shim_sitecustomize


@contextmanager
def shim_environment(
    strategy: str,
    manifest: str | os.PathLike | None,
    *,
    device: str | None = None,
    base_env: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Iterator[dict[str, str]]:
    """Yield an environment for a rerun with the shim; the shim directory is removed on exit.

    ``strategy`` is one of ``shim.STRATEGIES`` (``none`` still records the manifest); ``extra``
    adds READTRACE_* tuning variables (see ``readtrace.inject.shim``).
    """
    if strategy not in STRATEGIES:
        raise ReadtraceError(f"unknown fix strategy {strategy!r} (choose from {', '.join(STRATEGIES)})",
                             ExitStatus.USAGE)
    env = dict(os.environ if base_env is None else base_env)
    with tempfile.TemporaryDirectory(prefix="readtrace-shim-") as shim_dir:
        shutil.copyfile(shim_sitecustomize.__file__, os.path.join(shim_dir, "sitecustomize.py"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim_dir, env.get("PYTHONPATH")) if p)
        env["READTRACE_PYTHONPATH"] = str(Path(readtrace.__file__).resolve().parent.parent)
        env["READTRACE_FIX"] = strategy
        env.pop("READTRACE_MANIFEST", None)
        if manifest is not None:
            env["READTRACE_MANIFEST"] = os.fspath(manifest)
        env.pop("READTRACE_DEVICE", None)
        if device:
            env["READTRACE_DEVICE"] = device
        env.update(extra or {})
        yield env
