"""Every sentence true (issue 22) on a real recording: four threads, each with its own
``safe_open`` of one checkpoint on the lab mount at 20 ms first byte (their faults share the
mount's handles), recorded with eBPF. One cause per wasted second, the costs add up to no more
than the wall, severity follows the seconds, nothing of readtrace's own in the report, and the
HTML report read in a real headless browser (Debian's chromium): line breaks, not literal ``\\n``,
and nothing wider than a 1400 px window."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import lab_mount, require

from readtrace.analyze import analyze
from readtrace.analyze.rules.cost import by_seconds
from readtrace.analyze.rules.types import SEVERITIES
from readtrace.analyze.storage.whatif import own_mount_predictions
from readtrace.report import report_json
from readtrace.report.html import write_html
from readtrace.report.terminal import TerminalReport
from readtrace.report.units import fmt_seconds
from readtrace.trace import load_trace

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse, pytest.mark.slow]
recorder = pytest.importorskip("readtrace.record", reason="the recorder is not available")
THREADS = textwrap.dedent("""
    import sys, threading
    from safetensors import safe_open
    path = sys.argv[1]
    with safe_open(path, "pt") as f:
        names = list(f.keys())
    def work(part):
        with safe_open(path, "pt") as f:
            for n in part:
                f.get_tensor(n).clone()
    ts = [threading.Thread(target=work, args=(names[i::4],)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
""")
WINDOW = 1400
# Appended to a copy of the report: what the browser rendered, written where --dump-dom shows it.
PROBE = ("<script>window.addEventListener('load', () => { const p = document.createElement('pre'); "
         "p.id = 'readtrace-probe'; p.textContent = JSON.stringify({scrollWidth: "
         "document.documentElement.scrollWidth, text: document.body.innerText}); "
         "document.body.appendChild(p); });</script>")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from readtrace.workloads import make_checkpoint

    require(os.geteuid() == 0, "recording needs root")
    tmp = tmp_path_factory.mktemp("truth")
    script = tmp / "threads.py"
    script.write_text(THREADS)
    with lab_mount(tmp, lambda src: make_checkpoint(src, 32)[0], latency_ms=20.0) as (mnt, ck):
        path = f"{mnt}/{ck.name}"
        result = recorder.record_command([sys.executable, str(script), path], tmp / "t.rtrace", quiet=True)
    return analyze(load_trace(result.trace_path)), path


def test_one_cause_per_wasted_second(recorded):
    a, path = recorded
    wall = a.summary.wall_s
    on_model = [f for f in a.findings if f.file == path]
    causes = [f for f in on_model if f.role == "cause"]
    assert len(causes) == 1, [(f.code, f.role) for f in on_model]
    cause = causes[0]
    assert cause.cost_s is not None and 0 < cause.cost_s <= cause.wait_s <= wall
    allowed = by_seconds(cause.cost_s, wall, a.thresholds)  # never more severe than its seconds allow
    assert SEVERITIES.index(cause.severity) >= SEVERITIES.index(allowed)
    if cause.code == "SHARED_FD_INTERLEAVE":  # its rule allows HIGH on this mount: the seconds decide
        assert cause.severity == allowed
    assert cause.floor_s is not None and cause.floor_s < cause.wait_s and "gcsfuse model" in cause.floor_model
    shows = [f for f in on_model if f is not cause]
    assert shows and all(f.cause == cause.code and f.role in ("mechanism", "precondition") and f.cost_s == 0
                         and f.severity == "info" for f in shows)
    assert sum(f.cost_s for f in a.findings if f.cost_s) <= wall
    # the cause comes first, how it shows right after it
    at = a.findings.index(cause)
    assert a.findings[at + 1:at + 1 + len(shows)] == shows


def test_nothing_of_readtrace_own_and_no_empty_rows(recorded):
    a, path = recorded
    d = report_json(a)
    assert d["summary"]["readtrace_files_dropped"] >= 1  # at least its Python calls log
    assert not [f["path"] for f in d["files"] if "readtrace-calls-" in f["path"]]
    hidden = [f for f in d["files"] if f["hidden"]]
    assert all(f["bytes_read"] == 0 or not f["path"].startswith("/") for f in hidden)
    out = io.StringIO()
    TerminalReport(a).render(out, width=200, color=False)
    text = out.getvalue()
    assert "readtrace-calls-" not in text and "<dev " not in text
    assert all(f["path"] not in text for f in hidden)
    costs = [f for f in d["findings"] if f["role"] == "cause" and f["file"] == path]
    assert len(costs) == 1 and f"costs {fmt_seconds(costs[0]['cost_s'])}" in costs[0]["message"]


def chromium() -> str:
    exe = shutil.which("chromium")
    require(exe is not None, "chromium missing (scripts/setup-system.sh installs it)")
    return exe


def browser_view(html_path, width: int = WINDOW) -> dict:
    """What headless Chromium rendered of an HTML file at ``width`` px: {"scrollWidth", "text"}."""
    probe = html_path.with_suffix(".probe.html")
    probe.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    p = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--no-first-run", f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom",
                        probe.as_uri()], capture_output=True, text=True, timeout=120)
    start = p.stdout.find('<pre id="readtrace-probe">')
    assert start >= 0, p.stderr[-2000:]
    import html

    body = p.stdout[start + len('<pre id="readtrace-probe">'):p.stdout.index("</pre>", start)]
    return json.loads(html.unescape(body))


def test_html_report_in_a_real_browser(recorded, tmp_path):
    a, _ = recorded
    out = tmp_path / "report.html"
    write_html(a, out, own_mount_predictions(a))
    seen = browser_view(out)
    assert "\\n" not in seen["text"], [line for line in seen["text"].splitlines() if "\\n" in line][:3]
    assert seen["scrollWidth"] <= WINDOW
    assert "costs " in seen["text"] and "how " in seen["text"]  # the cause's seconds, how it shows
