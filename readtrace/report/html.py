"""Self-contained HTML report: summary, findings, tables and inline PNG figures (works offline)."""

from __future__ import annotations

import base64
import html as _html
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from readtrace.analyze import Analysis
from readtrace.escape import printable
from readtrace.report import plots
from readtrace.report.prose import findings_line, render
from readtrace.report.terminal import TerminalReport, relevant_streams, replay_applies, table_files
from readtrace.report.units import fmt_bytes, fmt_pct, fmt_top

CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1300px;padding:0 12px;color:#222;
overflow-wrap:break-word}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:12px;margin:8px 0;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 6px} td.path{overflow-wrap:anywhere}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.finding{border-left:5px solid #999;padding:6px 10px;margin:10px 0;background:#fafafa}
.high{border-color:#c62828} .warn{border-color:#f9a825} .info{border-color:#1e88e5}
.sev{font-weight:bold;margin-right:6px} .ev{font-family:monospace;font-size:11px;color:#555;white-space:pre-wrap}
pre{white-space:pre-wrap} .shows{margin:2px 0 10px 22px;color:#555;font-size:13px}
.caveat{background:#fff8e1;border-left:5px solid #f9a825;padding:6px 10px}
.partial{background:#c62828;color:#fff;padding:8px 12px;font-weight:bold}
.rec{margin-top:4px} .missing{color:#777;font-style:italic} img{max-width:100%}
code{background:#f0f0f0;padding:1px 4px}
"""


@dataclass
class Figure:
    title: str
    png_b64: str | None
    missing: str | None


def _png(draw) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5), dpi=90)
    try:
        draw(ax)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def figures(a: Analysis, predictions: list) -> list[Figure]:
    path = a.files["path"].iloc[0] if len(a.files) else ""
    specs = [
        ("prediction", "Measured vs predicted load time (the what-if model, as recorded and fixed)",
         lambda: plots.get_prediction_df(a, predictions), lambda df, ax: plots.plot_prediction(df, ax=ax, title="")),
        ("offset_time_task", f"Offset over time per task: {path}",
         lambda: plots.get_offset_time_df(a, "task"), lambda df, ax: plots.plot_offset_time(df, ax=ax)),
        ("offset_time_handle", f"Offset over time per FUSE handle (what the daemon saw): {path}",
         lambda: plots.get_offset_time_df(a, "handle"),
         lambda df, ax: plots.plot_offset_time(df, ax=ax, connect=True)),
        ("size_histogram", "Access sizes (Darshan bins)", lambda: plots.get_size_histogram_df(a),
         lambda df, ax: plots.plot_size_histogram(df, ax=ax, title="")),
        ("cache_misses", "Page-cache misses over time", lambda: plots.get_cache_misses_df(a),
         lambda df, ax: plots.plot_cache_misses(df, ax=ax, title="")),
    ]
    out = []
    for name, title, get, plot in specs:
        why = plots.missing_reason(a, name)
        if why:
            out.append(Figure(title, None, why))
            continue
        df = get()
        out.append(Figure(title, _png(lambda ax, df=df, plot=plot: plot(df, ax)), None))
    return out


def _esc(x) -> str:
    return _html.escape(printable(x))


def _lines(lines: list[str]) -> str:
    """Lines escaped one by one and joined by real line breaks (``printable`` would show a joined
    text's breaks as a literal backslash-n)."""
    return "\n".join(_esc(line) for line in lines)


def _table(rows: list[list], header: list[str], numeric: set[int]) -> str:
    """Numeric columns right-aligned; a "file" column may break anywhere (long paths must not widen the page)."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    kind = {i: "num" if i in numeric else "path" if h == "file" else "" for i, h in enumerate(header)}
    body = "".join("<tr>" + "".join(f"<td class='{kind[i]}'>{_esc(c)}</td>" if kind[i] else f"<td>{_esc(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _files_html(a: Analysis, limit: int = 20) -> str:
    data, code = table_files(a)
    rows = [[f["path"], f["fstype"], fmt_bytes(f["bytes_read"]), fmt_pct(f["consecutive_fraction"]),
             fmt_pct(f["sequential_fraction"]), fmt_pct(f["seek_fraction"]), fmt_pct(f["cache_miss_fraction"]),
             int(f["fuse_read_requests"]), int(f["page_faults"]),
             fmt_top(f["top_sizes"]) if isinstance(f["top_sizes"], list) else ""]
            for _, f in data.head(limit).iterrows()]
    more = (f"<p class='missing'>{len(data) - limit} more data files (less read) in --json</p>"
            if len(data) > limit else "")
    if len(code):
        more += (f"<p class='missing'>+ {len(code)} code and library files (.so, .py, .pyc ...): "
                 f"{fmt_bytes(code['bytes_read'].sum())} read, {int(code['page_faults'].sum())} faults</p>")
    return _table(rows, ["file", "fs", "read", "consecutive", "sequential", "after seek", "cache miss",
                         "FUSE reads", "faults", "top sizes"], {2, 3, 4, 5, 6, 7, 8}) + more


def _streams_html(a: Analysis, limit: int = 40) -> str:
    s = relevant_streams(a, ("fuse_handle", "ofd", "task"), limit)
    rows = []
    for _, r in s.iterrows():
        score = "" if pd.isna(r["interleave_score"]) else f"{r['interleave_score']:.2f}"
        rows.append([r["kind"], r["stream"], r["path"], int(r["tasks"]), fmt_bytes(r["bytes"]),
                     fmt_pct(r["consecutive_fraction"]), fmt_pct(r["seek_fraction"]),
                     fmt_pct(r["task_consecutive_fraction"]), score,
                     "" if pd.isna(r["gcsfuse_requests"]) or not replay_applies(r["fstype"])
                     else int(r["gcsfuse_requests"])])
    more = (f"<p class='missing'>{len(a.streams) - len(s)} more streams (other files, processes, whole files) "
            "in --json</p>" if len(a.streams) > len(s) else "")
    return _table(rows, ["kind", "stream", "file", "tasks", "bytes", "consecutive", "after seek",
                         "tasks' own consecutive", "interleave score", "gcsfuse requests"],
                  {3, 4, 5, 6, 7, 8, 9}) + more


def _findings_html(a: Analysis) -> str:
    if not a.findings:
        return "<p>No findings: nothing in this trace looks slow for its file system.</p>"
    parts = []
    for f in a.findings:
        p = render(f)
        if f.cause:  # how the cause above shows: one line under it
            parts.append(f"<div class='shows'>+ <b>{_esc(f.code)}</b> {_esc(p.message)}</div>")
            continue
        ev = _lines(p.evidence)
        basis = f"<div class='basis'>seen in: {_esc(f.basis)}</div>" if f.basis and not f.inferred else ""
        parts.append(f"<div class='finding {f.severity}'><span class='sev'>{f.severity.upper()}</span>"
                     f"<b>{_esc(f.code)}</b> {_esc(p.message)}<div class='ev'>{ev}</div>{basis}"
                     f"<div class='rec'>&rarr; {_esc(p.recommendation)}</div></div>")
    return "".join(parts)


def _caveat(a: Analysis, own: list) -> str:
    why = plots.prediction_caveat(a, own)
    return f"<p class='caveat'>{_esc(why)}</p>" if why else ""


def _partial_html(a: Analysis) -> str:
    return "" if a.completeness.complete else f"<div class='partial'>{_esc(a.completeness.headline())}</div>"


def render_html(a: Analysis, own: list, predictions: list | None = None) -> str:
    """The page. ``own``: the what-if model's predictions of the trace's own mount
    (``whatif.own_mount_predictions``), charted unless ``predictions`` (--what-if) are given."""
    header = _lines(TerminalReport(a).header().plain.split("\n"))
    next_cmd = TerminalReport(a).next_command().plain
    figs = [f"<h2>{_esc(f.title)}</h2>" + (f"<img alt='{_esc(f.title)}' src='data:image/png;base64,{f.png_b64}'>"
                                           if f.png_b64 else f"<p class='missing'>Not shown: {_esc(f.missing)}.</p>")
            for f in figures(a, own if predictions is None else predictions)]
    # leads like the terminal: the time split, the fixed prediction, then predicted vs measured
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>readtrace report</title>"
            f"<style>{CSS}</style></head><body>{_partial_html(a)}<h1>readtrace report</h1><pre>{header}</pre>{figs[0]}{_caveat(a, own)}"
            f"<h2>Findings</h2><p>{_esc(findings_line(a.findings, a.summary.wall_s, a.thresholds))}</p>{_findings_html(a)}<p><code>{_esc(next_cmd)}</code></p>"
            f"<h2>Files</h2>{_files_html(a)}<h2>Streams</h2>{_streams_html(a)}{''.join(figs[1:])}</body></html>")


MARKER = b"<title>readtrace report</title>"  # how --force recognises a report of ours


def write_html(a: Analysis, path: Path, own: list, predictions: list | None = None) -> None:
    Path(path).write_text(render_html(a, own, predictions), encoding="utf-8")
