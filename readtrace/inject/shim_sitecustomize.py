"""Copied as ``sitecustomize.py`` into a directory put first on PYTHONPATH for a rerun (see shim_env).

Standard library only and cheap: it reads the rerun's settings (readtrace.inject.protocol, standard
library only), installs an import hook that patches ``safetensors`` and ``safetensors.torch`` as they
are imported (nothing else is imported until then), prefetches the rerun's start-up files if any,
then runs the ``sitecustomize`` this one shadows, if any.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATCHED = ("safetensors", "safetensors.torch", "torch", "transformers.modeling_utils",
            "diffusers.models.modeling_utils")


class _SafetensorsHook(importlib.abc.MetaPathFinder):
    """Finds safetensors modules through the other finders and patches each right after it runs."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                _patch_after_exec(spec.loader, name)
                return spec
        return None


def _patch_after_exec(loader, name):
    run_module = loader.exec_module

    def exec_module(module):
        run_module(module)
        shim = sys.modules.get("readtrace.inject.shim")
        if shim is not None and not getattr(shim, "READY", False):
            return  # imported by the shim itself (torch): it patches what it finds once it is ready
        _shim().patch(name, module)

    loader.exec_module = exec_module


def _readtrace_importable():
    extra = os.environ.get("READTRACE_PYTHONPATH")  # Rerun.readtrace_path: read before readtrace imports
    if extra and extra not in sys.path:
        sys.path.append(extra)  # last: the user's own packages keep precedence


def _shim():
    _readtrace_importable()
    from readtrace.inject import shim

    return shim


def _prefetch_at_start():
    _readtrace_importable()
    from readtrace.inject.startup import prefetch_at_start

    prefetch_at_start()


def _run_shadowed_sitecustomize():
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _rerun():
    _readtrace_importable()
    from readtrace.inject.protocol import Rerun

    return Rerun.from_env()


_RERUN = _rerun()
if _RERUN.active:
    sys.meta_path.insert(0, _SafetensorsHook())
if _RERUN.start_prefetch():
    _prefetch_at_start()
del _RERUN
_run_shadowed_sitecustomize()
