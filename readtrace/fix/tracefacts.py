"""What ``readtrace fix`` reads from a recorded trace: a run's summary (the Analysis's, its findings'
codes and figures, per rank), and a trace's command, working directory and checkpoint files."""

from __future__ import annotations

import os
from collections.abc import Iterable

from readtrace.errors import TraceError
from readtrace.fs.datafiles import DATA_SUFFIXES, SYSTEM_PREFIXES, VOLUME_MIN_BYTES
from readtrace.fs.datafiles import is_code as _is_code


def trace_summary(trace_path) -> dict | None:
    """One trace's summary as a Run keeps it: the Analysis's ``summary`` as plain data plus its findings'
    codes and figures, read from the Analysis itself (no renderer in between)."""
    try:
        from readtrace.analyze import analyze
    except ImportError:
        return None
    from readtrace.trace import load_trace

    return summary_of(analyze(load_trace(trace_path)))


def summary_of(analysis) -> dict:
    """``trace_summary`` of an Analysis already made."""
    import json

    from readtrace.analyze.storage import levers
    from readtrace.report.jsonreport import plain

    summary = plain(analysis.summary.data())
    findings = [plain(f.data()) for f in analysis.findings]
    summary["findings"] = [f["code"] for f in findings]
    # what fix/verdict.py's own_change needs to name the user's own lever
    summary["finding_facts"] = [{k: f.get(k) for k in ("code", "tasks", "mapping", "view")} for f in findings]
    summary["io_model"] = levers.io_model(analysis)  # what auto ranks its candidates by (fix/predict.py)
    if analysis.rank_spans:  # a distributed job: per rank (bytes, spans, wait) and its byte spans
        paths = analysis.files["path"]
        summary["ranks"] = json.loads(analysis.ranks.drop(columns=["pids"]).to_json(orient="records"))
        summary["rank_spans"] = {str(r): [[paths[f], s, e] for f, s, e in spans]
                                 for r, spans in analysis.rank_spans.items()}
    return summary


def spans_by_path(summary: dict) -> dict[int, list]:
    """rank -> [(path, start, end)] from a trace summary's ``rank_spans``."""
    return {int(r): [tuple(p) for p in spans] for r, spans in (summary.get("rank_spans") or {}).items()}


# A file of no data suffix is a checkpoint file by volume (fs/datafiles.VOLUME_MIN_BYTES read) and at least
# VOLUME_SHARE of the most any such file gave the load (a tokenizer or config beside the weights is not).
VOLUME_SHARE = 0.10



def checkpoint_files(files: Iterable[tuple[str, int, int]], cwd: str | None = None) -> list[str]:
    """The checkpoint files among a trace's ``files`` = (path, size, bytes the load read or faulted):
    absolute paths (a relative one taken from ``cwd``) of existing non-empty files that carry the load's
    data, by suffix (DATA_SUFFIXES), as a shard named by an ``*.index.json`` the load read, or by volume;
    never code (executables, shared objects, Python sources and bytecode, anything of an installed
    Python environment, wherever it lives), nor system files."""
    rows = []
    for path, size, touched in files:
        if not isinstance(path, str) or not path or not size or size <= 0:
            continue
        path = os.path.normpath(os.path.join(cwd or os.getcwd(), path))
        if not path.startswith(SYSTEM_PREFIXES) and os.path.isfile(path) and not _is_code(path):
            rows.append((path, int(size), int(touched or 0)))
    shards = _index_shards(p for p, _, _ in rows)
    by_name = {p for p, _, _ in rows if p.endswith(DATA_SUFFIXES) or p in shards}
    others = [(p, touched or size) for p, size, touched in rows if p not in by_name and not p.endswith(".json")]
    most = max((v for _, v in others), default=0)
    by_volume = {p for p, v in others if v >= VOLUME_MIN_BYTES and v >= VOLUME_SHARE * most}
    return sorted(by_name | by_volume)


def _index_shards(paths: Iterable[str]) -> set[str]:
    """The shard files named by the ``*.index.json`` files among ``paths`` (their weight_map)."""
    import json

    shards = set()
    for index in (p for p in paths if p.endswith(".index.json")):
        try:
            with open(index) as f:
                weight_map = json.load(f).get("weight_map") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(weight_map, dict):
            shards.update(os.path.join(os.path.dirname(index), str(v)) for v in weight_map.values())
    return shards


def command_from_trace(path: str | os.PathLike, command: list[str] | None = None
                       ) -> tuple[list[str], str | None, list[str]]:
    """(command, cwd, checkpoint files) of a recorded trace: see ``checkpoint_files``."""
    from readtrace.trace import load_trace

    trace = load_trace(path)
    command = command or trace.meta.get("command")
    if not command:
        raise TraceError(f"{path}: the trace does not record its command; give it: -- CMD")
    cwd = trace.meta.get("cwd")
    touched = _bytes_touched(trace)
    files = [(p, size, touched.get(p, 0)) for p, size in zip(trace.files["path"], trace.files["size"], strict=True)]
    return list(command), cwd, checkpoint_files(files, cwd)


def _bytes_touched(trace) -> dict[str, int]:
    """path -> bytes the recorded load read from it (read syscalls) or faulted in (page faults)."""
    touched: dict[str, int] = {}
    reads = trace.reads
    if len(reads):
        for p, n in reads.assign(ret=reads["ret"].clip(lower=0)).groupby("path", observed=True)["ret"].sum().items():
            touched[p] = touched.get(p, 0) + int(n)
    pages = trace.pages
    if len(pages):
        faults = pages[pages["op"].isin(("fault", "map_pages"))]
        for p, n in faults.groupby("path", observed=True)["size"].sum().items():
            touched[p] = touched.get(p, 0) + int(n)
    return touched
