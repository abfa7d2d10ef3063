"""Copied as ``sitecustomize.py`` into a directory put first on PYTHONPATH for a rerun (see shim_env).

Standard library only and cheap: it reads the rerun's settings (readtrace.rerun.protocol, standard
library only), installs an import hook that patches ``safetensors`` and ``safetensors.torch`` as they
are imported (nothing else is imported until then) and, under ``readtrace record``, wraps the
loaders' entry points to record which call issued the reads (readtrace.inject.calls), prefetches the
rerun's start-up files if any, registers the fork handler of readtrace.inject.forkfd (each forked
worker's own open file on the checkpoints, or a note that it shared its parent's), patches
``mmap.mmap`` for the checkpoint files (readtrace.inject.mapfill: populate through the loader's fd, and
a digest of the mapped bytes), then runs the ``sitecustomize`` this one shadows, if any.
"""

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATCHED = ("safetensors", "safetensors.torch", "torch", "transformers.modeling_utils",
            "diffusers.models.modeling_utils", "torch.distributed.checkpoint")
_RECORDED = _PATCHED + ("transformers.models.auto.auto_factory", "diffusers.models.model_loading_utils",
                        "diffusers.pipelines.pipeline_utils", "diffusers.loaders.single_file_model",
                        "diffusers.loaders.single_file")  # inject/calls.py ENTRY_POINTS


class _SafetensorsHook(importlib.abc.MetaPathFinder):
    """Finds the loaders' modules through the other finders and patches each right after it runs:
    the shim's routing (``patch``) and/or the entry-point recording (``record``)."""

    def __init__(self, patch, record):
        self.names = (_PATCHED if patch else ()) + (_RECORDED if record else ())
        self.patch, self.record = patch, record

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                _patch_after_exec(spec.loader, name, self.patch and name in _PATCHED, self.record)
                return spec
        return None


def _patch_after_exec(loader, name, patch, record):
    run_module = loader.exec_module

    def exec_module(module):
        run_module(module)
        if patch:
            _fail_closed("patch of a loader module", _patch, name, module)
        if record:  # after the shim: the recorded call is the outermost
            _fail_closed("call recording", lambda: _calls().wrap(name, module))

    loader.exec_module = exec_module


def _patch(name, module):
    shim = sys.modules.get("readtrace.inject.shim")
    if shim is not None and not getattr(shim, "READY", False):
        return  # imported by the shim itself (torch): it patches what it finds once it is ready
    _shim().patch(name, module)


def _calls():
    _readtrace_importable()
    from readtrace.inject import calls

    return calls


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


def _own_fd_per_fork(rerun):
    _readtrace_importable()
    from readtrace.inject.forkfd import install

    install(rerun)


def _fill_mappings(rerun):
    _readtrace_importable()
    from readtrace.inject.mapfill import install

    install(rerun)


def _run_shadowed_sitecustomize():
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _rerun():
    _readtrace_importable()
    from readtrace.rerun.protocol import Rerun

    return Rerun.from_env()


def _fail_closed(what, call, *args):
    """``call(*args)``, readtrace's own work: an error is noted (readtrace.inject.failclosed: stderr once,
    the run unproven) and swallowed, so the user's program goes on as it would without readtrace."""
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 - the bootstrap of failclosed.guarded: readtrace may not import
        with contextlib.suppress(Exception):
            _readtrace_importable()
            from readtrace.inject.failclosed import failed

            failed(what, e)
        return None


def _set_up():
    rerun = _rerun()
    if rerun.active or rerun.calls_log:
        sys.meta_path.insert(0, _SafetensorsHook(rerun.active, bool(rerun.calls_log)))
    if rerun.active:
        _own_fd_per_fork(rerun)
        if rerun.files or rerun.prefetch_files:
            _fill_mappings(rerun)
    if rerun.start_prefetch() or rerun.early_read_candidates():
        _prefetch_at_start()


_fail_closed("start-up hook", _set_up)
_run_shadowed_sitecustomize()
