"""The recorder's half of the python_calls view: the command's environment and the log it leaves.

``python_calls(env, creds)`` yields the environment of a recorded command with the sitecustomize
hook on PYTHONPATH and ``Rerun.calls_log`` set (readtrace.inject: the same injection as ``fix``),
then ``PythonCalls.read()`` turns the log into the trace's rows (schema.PYTHON_CALLS) and
``meta["python_calls"]``. A command that is no Python program ignores the variables.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pandas as pd

from readtrace import runstate
from readtrace.record.launch import Credentials
from readtrace.rerun.protocol import Rerun

MAX_LOG_BYTES = 1 << 30  # a runaway log is cut here (counted), the recording is kept


@dataclass
class PythonCalls:
    env: dict
    log: str

    def read(self) -> tuple[pd.DataFrame, dict]:
        """(rows of the python_calls table, meta["python_calls"]) from the log."""
        rows, entries, wrap_failed, failures, unparsed = [], {}, [], 0, 0
        used: dict[str, dict] = {}  # entry point -> lever keywords its calls passed (e.g. mmap=True)
        try:
            with open(self.log, "rb") as f:
                data = f.read(MAX_LOG_BYTES)
        except OSError:
            data = b""
        for line in data.splitlines():
            try:
                r = json.loads(line)
                kind = r["k"]
                if kind == "call":
                    rows.append({"ts_ns": int(r["ts"]), "end_ns": int(r["end"]), "pid": int(r["pid"]),
                                 "tid": int(r["tid"]), "depth": int(r["depth"]), "call": str(r["call"]),
                                 "chain": str(r["chain"]), "path": r.get("path"), "ok": int(bool(r["ok"])),
                                 "id": int(r.get("id", 0)), "parent": int(r.get("parent", 0))})
                    used.setdefault(str(r["call"]), {}).update(r.get("kw") or {})
                elif kind == "entry":
                    entries[str(r["call"])] = {"library": str(r["library"]), "version": str(r["version"]),
                                               "accepts": [str(k) for k in r.get("accepts", [])],
                                               "values": {str(k): [str(v) for v in vs]
                                                          for k, vs in (r.get("values") or {}).items()}}
                elif kind == "wrap_failed":
                    wrap_failed.append(f"{r['call']}: {r['error']}")
                elif kind == "failures":
                    failures += int(r["n"])
            except (ValueError, KeyError, TypeError):
                unparsed += 1
        for call, passed in used.items():
            if call in entries:
                entries[call]["used"] = passed
        meta = {"rows": len(rows), "entry_points": entries, "wrap_failed": wrap_failed,
                "record_failures": failures, "unparsed_lines": unparsed, "log_cut": len(data) >= MAX_LOG_BYTES}
        return pd.DataFrame(rows), meta


def write_calls(calls: PythonCalls | None, writer) -> dict:
    """Append the log's rows to the trace; the meta keys to add (none when not recorded)."""
    if calls is None:
        return {}
    rows, meta = calls.read()
    writer.append("python_calls", rows)
    return {"python_calls": meta}


@contextlib.contextmanager
def python_calls(env: dict | None, creds: Credentials | None) -> Iterator[PythonCalls]:
    """The command's environment with the entry-point recording on; the log is removed on exit.
    An environment that already injects the shim (``fix --compare`` records its reruns) keeps it."""
    from readtrace.rerun.environment import shim_environment

    base = dict(os.environ if env is None else env)
    fd, log = tempfile.mkstemp(prefix=f"{runstate.PREFIX}calls-", suffix=".jsonl")
    try:
        if creds is not None:  # the command runs as the sudo user: the log must be theirs to append to
            os.fchown(fd, creds.uid, creds.gid)
        os.close(fd)
        rerun = Rerun.from_env(base)
        with runstate.noted("calls", log):
            if rerun.readtrace_path:  # the hook is on PYTHONPATH already
                yield PythonCalls(replace(rerun, calls_log=log).to_env(base), log)
            else:
                with shim_environment("none", None, base_env=base, calls_log=log) as shimmed:
                    yield PythonCalls(shimmed, log)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log)
