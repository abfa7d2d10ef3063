"""The report of a job of several nodes (``readtrace report A.rtrace B.rtrace ...``): nodes, ranks and
the cross-node findings, then one summary line per node (each node's full report: report its trace)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from readtrace.analyze.job.analysis import NODE_COLUMNS, JobAnalysis
from readtrace.analyze.job.ranks import RANK_COLUMNS
from readtrace.report.jsonreport import _finding, plain
from readtrace.report.prose import render
from readtrace.report.terminal import PIPED_WIDTH, SEVERITY_STYLE, _is_terminal
from readtrace.report.units import fmt_bytes, fmt_seconds

JOB_REPORT_VERSION = 1


def job_json(job: JobAnalysis) -> dict:
    """``nodes`` (one row per trace analysed, with its summary and finding codes), ``ranks``, the
    cross-node ``findings``; ``partial`` and ``missing`` (trace, error) when node traces could not be
    analysed. Each node's full report: ``readtrace report NODE.rtrace``."""
    ranks = job.ranks[[c for c in ("node", *RANK_COLUMNS) if c in job.ranks]]
    return {
        "report_version": JOB_REPORT_VERSION,
        "clock": job.clock,
        "nodes": [plain(r) for r in job.node_rows[list(NODE_COLUMNS)].to_dict("records")],
        "ranks": [plain(r) for r in ranks.to_dict("records")],
        "findings": [_finding(f) for f in job.findings],
        "node_summaries": [plain(n.summary.data()) for n in job.nodes],
        "partial": bool(job.missing),
        "missing": [{"trace": m.trace, "error": m.error} for m in job.missing],
    }


def write_job_json(job: JobAnalysis, out: IO[str]) -> None:
    json.dump(job_json(job), out, indent=2)
    out.write("\n")


def render_job(job: JobAnalysis, out: IO[str]) -> None:
    console = Console(file=out, width=None if _is_terminal(out) else PIPED_WIDTH, highlight=False,
                      soft_wrap=False)
    missing = f", {len(job.missing)} missing: a partial job" if job.missing else ""
    nodes = Table(title=f"{len(job.nodes)} nodes{missing} ({job.clock})", title_justify="left")
    for col in ("trace", "host", "start", "wall", "I/O wait", "read", "from remote", "files", "ranks", "findings"):
        nodes.add_column(col, justify="left" if col in ("trace", "host") else "right")
    for r in job.node_rows.itertuples():
        nodes.add_row(Path(r.trace).name if r.trace else "-", str(r.host), fmt_seconds(r.start_offset_s), fmt_seconds(r.wall_s),
                      fmt_seconds(r.io_wait_s), fmt_bytes(r.bytes_read), fmt_bytes(r.remote_bytes_read),
                      str(r.files), str(r.ranks), ", ".join(r.findings) or "-")
    parts = [nodes]
    if len(job.ranks):
        ranks = Table(title="ranks", title_justify="left")
        for col in ("node", "rank", "local", "read", "spans", "wait", "first", "last"):
            ranks.add_column(col, justify="right")
        for r in job.ranks.sort_values(["node", "rank"]).itertuples():
            ranks.add_row(str(r.node), str(r.rank), str(r.local_rank), fmt_bytes(r.bytes_read),
                          fmt_bytes(r.span_bytes), fmt_seconds(r.wait_s), fmt_seconds(r.first_s), fmt_seconds(r.last_s))
        parts.append(ranks)
    text = Text()
    for m in job.missing:
        text.append("[HIGH] MISSING_NODE", style=SEVERITY_STYLE["high"])
        text.append(f"  {m.trace}: not analysed: {m.error}\n")
    for f in job.findings:
        p = render(f)
        text.append(f"[{f.severity.upper()}] {f.code}", style=SEVERITY_STYLE.get(f.severity, ""))
        text.append(f"  {p.message}\n")
        for line in p.evidence:
            text.append(f"    {line}\n")
        text.append(f"  -> {p.recommendation}\n")
    if not job.findings:
        text.append("no cross-node findings\n")
    parts.append(text)
    console.print(Group(*parts))
