"""The environment that injects the shim into an unchanged command: a sitecustomize on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import readtrace
from readtrace import runstate
from readtrace.errors import UsageError
from readtrace.rerun.protocol import STRATEGIES, Rerun

# Copied, never imported here: importing it would run the hook, and the user's own sitecustomize it
# shadows, a second time in readtrace's own process.
SHIM = Path(__file__).parents[1] / "inject" / "shim_sitecustomize.py"


@contextmanager
def shim_environment(
    strategy: str,
    manifest: str | os.PathLike | None,
    *,
    device: str | None = None,
    base_env: Mapping[str, str] | None = None,
    prefetch_files: Iterable[str] = (),
    **settings,
) -> Iterator[dict[str, str]]:
    """Yield an environment for a rerun with the shim; the shim directory is removed on exit.

    ``strategy`` is one of ``protocol.STRATEGIES`` (``none`` still records the manifest);
    ``prefetch_files`` are prefetched at interpreter start when the strategy prefetches; ``settings``
    are other ``protocol.Rerun`` fields. Tuning already in ``base_env`` (READTRACE_CHUNK_MB ...) is kept.
    """
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown fix strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    base = dict(os.environ if base_env is None else base_env)
    rerun = replace(Rerun.from_env(base), strategy=strategy, manifest=None if manifest is None else os.fspath(manifest),
                    device=device or None, prefetch_files=tuple(prefetch_files), prefetched=(),
                    readtrace_path=str(Path(readtrace.__file__).resolve().parent.parent), **settings)
    with tempfile.TemporaryDirectory(prefix=f"{runstate.PREFIX}shim-") as shim_dir, runstate.noted("shim", shim_dir):
        os.chmod(shim_dir, 0o755)  # noqa: S103 - a command recorded under sudo runs as the invoking user
        shutil.copyfile(SHIM, os.path.join(shim_dir, "sitecustomize.py"))
        env = rerun.to_env(base)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim_dir, base.get("PYTHONPATH")) if p)
        yield env
