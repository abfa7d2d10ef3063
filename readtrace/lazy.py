"""Packages that re-export their modules' names on first use, so importing one stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, tuple[str, str]]) -> Callable[[str], object]:
    """A module ``__getattr__``: ``exports`` maps name -> (submodule, attribute) of ``package``."""
    def __getattr__(name: str):
        if name in exports:
            module, attribute = exports[name]
            return getattr(importlib.import_module(f"{package}.{module}"), attribute)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
