"""Which Python loader call issued the reads: wraps the loaders' entry points in a recorded command.

Runs inside the user's process (``readtrace record`` sets ``Rerun.calls_log``; the sitecustomize hook
calls ``wrap`` as each module below is imported). Every call of an entry point appends one JSON line
to the log when it returns: pid, kernel thread id (``threading.get_native_id``, the tid the probes
see), start and end on CLOCK_MONOTONIC (``time.monotonic_ns``, the clock of ``bpf_ktime_get_ns``),
its depth and the chain of entry points the thread is inside, its id and the id of the call it ran
inside (``parent``). Work a recorded call hands to another thread (``ThreadPoolExecutor.submit``,
``threading.Thread.start``: transformers' and diffusers' loading pools) runs inside a row of its own
on the worker's thread with the submitting call's chain and that call as parent, so the worker's
reads and the calls it makes carry the chain of the call that asked for them. The first call of each entry point
also records the library's version and which of its own levers the installed version accepts
(read from its signature, so the report never names a keyword the library does not have).

Fail open: a wrapper that cannot be installed, or a record that cannot be written, is counted
(``wrap_failed`` lines, ``failures`` at exit) and the user's call runs as it would without us.
Standard library only.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import sys
import threading
import time

# module -> (attribute path, entry-point name, lever keywords to look for in the installed version)
ENTRY_POINTS = {
    "safetensors": (("safe_open", "safetensors.safe_open", ("backend",)),),
    "safetensors.torch": (("load_file", "safetensors.torch.load_file", ("backend",)),
                          ("safe_open", "safetensors.safe_open", ("backend",))),  # imported before the hook
    "torch": (("load", "torch.load", ("mmap",)),),
    "transformers.modeling_utils": (
        ("PreTrainedModel.from_pretrained", "transformers.PreTrainedModel.from_pretrained", ("disable_mmap",)),
        ("load_state_dict", "transformers.load_state_dict", ("disable_mmap",)),
    ),
    "transformers.models.auto.auto_factory": (
        ("_BaseAutoModelClass.from_pretrained", "transformers.AutoModel.from_pretrained", ("disable_mmap",)),
    ),
    "diffusers.models.modeling_utils": (
        ("ModelMixin.from_pretrained", "diffusers.ModelMixin.from_pretrained", ("disable_mmap",)),
    ),
    "diffusers.models.model_loading_utils": (
        ("load_state_dict", "diffusers.load_state_dict", ("disable_mmap",)),
    ),
    "diffusers.pipelines.pipeline_utils": (
        ("DiffusionPipeline.from_pretrained", "diffusers.DiffusionPipeline.from_pretrained", ("disable_mmap",)),
    ),
    "diffusers.loaders.single_file_model": (
        ("FromOriginalModelMixin.from_single_file", "diffusers.from_single_file", ("disable_mmap",)),
    ),
    "diffusers.loaders.single_file": (
        ("FromSingleFileMixin.from_single_file", "diffusers.DiffusionPipeline.from_single_file", ("disable_mmap",)),
    ),
}
TENSOR_METHODS = ("get_tensor", "get_tensors")  # methods of an open safetensors file that read tensor bytes
PATH_KEYWORDS = ("filename", "f", "checkpoint_file", "pretrained_model_name_or_path", "pretrained_model_link_or_path")
SEP = " -> "


class _State:
    def __init__(self):
        self.log = os.environ.get("READTRACE_CALLS") or None  # protocol.Rerun.calls_log
        self.fd = None
        self.fd_pid = None
        self.lock = threading.Lock()
        self.local = threading.local()  # .stack: (name, id, in chain) of the calls this thread is inside
        self.ids = itertools.count(1)  # call ids, per process (a forked child's continue its parent's)
        self.threads_wrapped = False
        self.described = set()
        self.failures = 0


_STATE = _State()


def wrap(module_name: str, module) -> None:
    """Wrap ``module``'s entry points (called by the import hook right after the module ran)."""
    if not _STATE.threads_wrapped and module_name in ENTRY_POINTS:
        _STATE.threads_wrapped = True
        try:
            _wrap_threads()
        except Exception as e:  # noqa: BLE001
            _write({"k": "wrap_failed", "call": "threads", "error": f"{type(e).__name__}: {e}"})
    for attr, name, levers in ENTRY_POINTS.get(module_name, ()):
        try:
            _wrap_one(module, attr, name, levers)
        except Exception as e:  # noqa: BLE001 - never break the import: count it
            _write({"k": "wrap_failed", "call": name, "error": f"{type(e).__name__}: {e}"})


def _wrap_one(module, attr: str, name: str, levers: tuple[str, ...]) -> None:
    owner_name, _, leaf = attr.rpartition(".")
    owner = getattr(module, owner_name) if owner_name else module
    raw = owner.__dict__.get(leaf) if isinstance(owner, type) else getattr(owner, leaf)
    if raw is None:
        raise AttributeError(f"{attr} not found")
    if getattr(raw, "__readtrace_call__", None) or getattr(getattr(raw, "__func__", None), "__readtrace_call__", None):
        return
    if isinstance(raw, classmethod):
        setattr(owner, leaf, classmethod(_recorded(raw.__func__, name, levers)))
    elif name == "safetensors.safe_open":
        setattr(owner, leaf, _recorded(raw, name, levers, result=_OpenFile))
    else:
        setattr(owner, leaf, _recorded(raw, name, levers))


def _recorded(fn, name: str, levers: tuple[str, ...], result=None):
    """``fn`` recorded as entry point ``name``; ``result`` wraps what it returns (an open file)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        frame = _enter(name, fn, levers, args, kwargs)
        out = _run(frame, fn, args, kwargs)
        if result is not None and frame is not None:
            try:
                return result(out, frame["path"])
            except Exception:  # noqa: BLE001
                _STATE.failures += 1
        return out

    call.__readtrace_call__ = name
    return call


class _OpenFile:
    """An open safetensors file whose tensor reads are recorded (``with safe_open(...) as f``)."""

    def __init__(self, inner, path):
        self._inner, self._path = inner, path

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def __getattr__(self, attr):
        value = getattr(self._inner, attr)
        if attr in TENSOR_METHODS and callable(value):
            return _recorded_method(value, f"safetensors.safe_open.{attr}", self._path)
        return value

    def __iter__(self):
        return iter(self._inner)


def _recorded_method(method, name: str, path):
    def call(*args, **kwargs):
        return _run(_enter(name, None, (), (), {}, path), method, args, kwargs)

    return call


def _run(frame, fn, args, kwargs):
    """``fn(*args, **kwargs)``, its record written when it returns or raises."""
    ok = False
    try:
        out = fn(*args, **kwargs)
        ok = True
        return out
    finally:
        _leave(frame, ok)


def _stack() -> list:
    stack = getattr(_STATE.local, "stack", None)
    if stack is None:
        stack = _STATE.local.stack = []
    return stack


def _enter(name, fn, levers, args, kwargs, path=None):
    try:
        stack = _stack()
        if fn is not None and name not in _STATE.described:
            _describe(name, fn, levers)
        names = [n for n, _, in_chain in stack if in_chain] + [name]
        frame = {"call": name, "ts": time.monotonic_ns(), "depth": len(names) - 1, "id": next(_STATE.ids),
                 "parent": stack[-1][1] if stack else 0, "chain": SEP.join(names),
                 "path": path if path is not None else _path_of(args, kwargs),
                 "kw": {k: kwargs[k] for k in levers if isinstance(kwargs.get(k), bool | str)}}
        stack.append((name, frame["id"], True))
        return frame
    except Exception:  # noqa: BLE001
        _STATE.failures += 1
        return None


def _leave(frame, ok: bool) -> None:
    if frame is None:
        return
    try:
        end = time.monotonic_ns()
        stack = _STATE.local.stack
        if stack and stack[-1][1] == frame["id"]:
            stack.pop()
        _write({"k": "call", "call": frame["call"], "chain": frame["chain"], "depth": frame["depth"],
                "id": frame["id"], "parent": frame["parent"], "pid": os.getpid(), "tid": threading.get_native_id(),
                "ts": frame["ts"], "end": end, "path": frame["path"], "ok": ok, "kw": frame["kw"]})
    except Exception:  # noqa: BLE001
        _STATE.failures += 1


# --- work a recorded call hands to other threads ------------------------------------------------
def _handoff():
    """The recorded call this thread is in, as the worker's starting point: (its frame's fields, the
    stack to continue), or None outside every recorded call (then nothing is wrapped: no cost)."""
    stack = getattr(_STATE.local, "stack", None)
    if not stack:
        return None
    names = [n for n, _, in_chain in stack if in_chain]
    return {"call": names[-1], "chain": SEP.join(names), "depth": len(names) - 1, "parent": stack[-1][1],
            "path": None, "kw": {}}, list(stack)


def _in_worker(handoff, fn):
    """``fn`` run on a worker thread as a row of its own: the submitting call's chain, that call as parent."""
    parent, stack = handoff

    @functools.wraps(fn)
    def work(*args, **kwargs):
        saved = getattr(_STATE.local, "stack", None)
        frame = dict(parent, ts=time.monotonic_ns(), id=next(_STATE.ids))
        _STATE.local.stack = stack + [(parent["call"], frame["id"], False)]
        try:
            return _run(frame, fn, args, kwargs)
        finally:
            _STATE.local.stack = saved

    return work


def _wrap_threads() -> None:
    """``ThreadPoolExecutor.submit`` and ``Thread.start`` carry the recorded call they are made in."""
    from concurrent.futures import ThreadPoolExecutor

    submit, start = ThreadPoolExecutor.submit, threading.Thread.start

    @functools.wraps(submit)
    def recorded_submit(self, fn, /, *args, **kwargs):
        handoff = _handoff()
        return submit(self, fn if handoff is None else _in_worker(handoff, fn), *args, **kwargs)

    @functools.wraps(start)
    def recorded_start(self):
        handoff = _handoff()
        # a pool's own worker threads run the tasks submit already wrapped
        if handoff is not None and getattr(getattr(self, "_target", None), "__module__", "") != "concurrent.futures.thread":
            self.run = _in_worker(handoff, self.run)
        return start(self)

    ThreadPoolExecutor.submit, threading.Thread.start = recorded_submit, recorded_start


def _path_of(args, kwargs):
    candidates = [kwargs.get(k) for k in PATH_KEYWORDS] + [a for a in args[:2] if not isinstance(a, type)]
    for value in candidates:
        if isinstance(value, str | os.PathLike):
            try:
                return os.fspath(value)
            except TypeError:
                continue
        name = getattr(value, "name", None)  # an open file (torch.load(f))
        if isinstance(name, str):
            return name
    return None


def _describe(name: str, fn, levers: tuple[str, ...]) -> None:
    """The entry point's library, version and the lever keywords the installed version accepts."""
    _STATE.described.add(name)
    library = name.split(".")[0]
    module = sys.modules.get(library)
    accepted = [k for k in levers if _accepts(fn, k)]
    values = {}
    if "backend" in accepted:  # safetensors documents the values on load_file (safe_open does not)
        doc = (getattr(fn, "__doc__", None) or "") + _load_file_doc()
        values["backend"] = [v for v in ("pread", "mmap") if f'"{v}"' in doc or f"'{v}'" in doc]
    _write({"k": "entry", "call": name, "library": library, "version": str(getattr(module, "__version__", "")),
            "accepts": accepted, "values": values})


def _load_file_doc() -> str:
    """safetensors.torch.load_file's source, where the backend values are documented (read, not
    imported: safetensors.torch imports torch)."""
    module = sys.modules.get("safetensors.torch")
    if module is not None:
        return getattr(module.load_file, "__doc__", None) or ""
    import importlib.util

    try:
        spec = importlib.util.find_spec("safetensors.torch")
        with open(spec.origin, encoding="utf-8") as f:
            return f.read(1 << 20)
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return ""


def _accepts(fn, keyword: str) -> bool:
    """Whether ``fn`` takes ``keyword``: a parameter, or read from ``**kwargs`` by name (diffusers'
    ``kwargs.pop("disable_mmap", False)``: the name is one of the function's own constants)."""
    import inspect

    target = inspect.unwrap(fn)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    if keyword in params:
        return True
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    code = getattr(target, "__code__", None)
    return takes_kwargs and code is not None and keyword in code.co_consts


def _write(record: dict) -> None:
    """One JSON line on the log, in one write (O_APPEND: processes and threads may share the log)."""
    if _STATE.log is None:
        return
    data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
    try:
        with _STATE.lock:
            if _STATE.fd is None or _STATE.fd_pid != os.getpid():  # a forked child opens its own
                _STATE.fd = os.open(_STATE.log, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                _STATE.fd_pid = os.getpid()
            os.write(_STATE.fd, data)
    except OSError:
        _STATE.failures += 1


def _at_exit() -> None:
    if _STATE.failures:
        _write({"k": "failures", "n": _STATE.failures, "pid": os.getpid()})


atexit.register(_at_exit)
