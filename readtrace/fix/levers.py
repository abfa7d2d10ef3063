"""The one-line levers loaders already offer, tried by `fix --compare` as candidates.

Each lever is a change a user can make in their own code (or environment); the rerun applies it
through the shim (``protocol.Rerun.lever``) or the environment, so the script itself stays unchanged.
Which levers apply comes from the discovery run's manifest: the loader calls it saw and the loader
libraries it imported. Kept import-free (the command line reads it before torch).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from readtrace.rerun.protocol import LeverName
from readtrace.rerun.records import Call


@dataclass(frozen=True)
class Lever:
    name: LeverName  # a str: compares, formats and serialises as its value
    change: str  # the one-line change for the user's own code
    applies: Callable[[set[str]], bool]  # given the calls/imports the discovery run saw
    installed: Callable[[], bool] = lambda: True
    env: dict = field(default_factory=dict)  # plain environment variables it sets
    shim: bool = True  # applied by the shim (False: the environment alone does it)

    def settings(self) -> dict:
        """protocol.Rerun fields for a rerun with this lever."""
        return {"lever": self.name} if self.shim else {}


@functools.cache  # the installed library does not change while fix runs: parse its source once
def _safetensors_has_backend() -> bool:
    """Whether the installed safetensors' ``load_file`` takes ``backend``, read from its source: importing
    safetensors.torch imports torch, 2.9 s of a 52 s ``fix --compare`` in a host that loads no tensor."""
    spec = importlib.util.find_spec("safetensors")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        source = Path(next(iter(spec.submodule_search_locations)), "torch.py").read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "load_file"
               and "backend" in {a.arg for a in node.args.args + node.args.kwonlyargs} for node in tree.body)


def _has(*names: str) -> Callable[[set[str]], bool]:
    return lambda seen: any(n in seen for n in names)


LEVERS = (
    Lever(LeverName.SAFETENSORS_PREAD, 'safetensors.torch.load_file(path, backend="pread") '
          '(safe_open(path, "pt", backend="pread"))', _has("load_file", "safe_open"), _safetensors_has_backend),
    Lever(LeverName.DISABLE_MMAP, "from_pretrained(..., disable_mmap=True)",
          _has("import:transformers", "import:diffusers")),
    Lever(LeverName.TORCH_LOAD_NO_MMAP, "torch.load(path, mmap=False)", _has("torch.load:mmap")),
    Lever(LeverName.OMP_1, "OMP_NUM_THREADS=1 before the command (or torch.set_num_threads(1))",
          _has("load_file", "safe_open", "torch.load", "torch.load:mmap", "import:torch"),
          env={"OMP_NUM_THREADS": "1"}, shim=False),
)

NO_FORKED_SHARING = ("an fd per worker (readtrace own fd per forked worker) is tried only where forked workers "
                     "inherited the parent's open checkpoint file; none did here")


def seen_in(calls: Iterable[Call]) -> set[str]:
    """What the discovery run used: call names, imports, and torch.load(mmap=True)."""
    seen = set()
    for c in calls:
        if c.call:
            seen.add(c.call)
            if c.call == "torch.load" and c.mmap:
                seen.add("torch.load:mmap")
    return seen


def levers_for(seen: set[str]) -> list[Lever]:
    return [lever for lever in LEVERS if lever.applies(seen) and lever.installed()]


def by_name(name: str) -> Lever | None:
    return next((lever for lever in LEVERS if lever.name == name), None)
