"""How a loader the shim cannot patch registers itself (readtrace's example loader patterns do).

Wrap the call in ``recorded_call``: during a rerun under ``readtrace fix`` the shim records the
tensors it returns in the manifest (the fix for such loaders is the start-up prefetch); otherwise
the loader just runs. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable

from readtrace.rerun.protocol import Rerun


def recorded_call(call: str, load: Callable[[], dict], tensor_files: list[tuple[str, str]]) -> dict:
    """``load()``'s {name: tensor}, recorded during a rerun; ``tensor_files``: (file, name) of each.
    The tensors must be materialised copies: digesting them then disturbs no lazy read."""
    if not Rerun.from_env().active:
        return load()
    from readtrace.inject import shim

    return shim.record_loader(call, load, tensor_files)
