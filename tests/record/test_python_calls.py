"""The python_calls view: which Python loader call issued the reads (readtrace/inject/calls.py,
record/pycalls.py, analyze/attribution.py), recorded through real safetensors, torch.load,
transformers and diffusers loads, joined with the real eBPF (and strace) read events."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from conftest import lab_mount, require
from workloads import ebpf_ready

from readtrace.analyze import analyze
from readtrace.analyze.attribution import innermost_calls
from readtrace.compat.checkpoints import build
from readtrace.report.prose import reads_from_lines
from readtrace.trace import load_trace, write_trace
from readtrace.trace.format import META_FILE

PY = sys.executable
LOADS = textwrap.dedent("""
    import json, os, sys, threading
    import torch, safetensors.torch
    from transformers import AutoModelForCausalLM
    from diffusers import UNet2DConditionModel
    ck = sys.argv[1]
    safetensors.torch.load_file(os.path.join(ck, "safetensors", "model.safetensors"))
    torch.load(os.path.join(ck, "pt", "model.pt"))
    AutoModelForCausalLM.from_pretrained(os.path.join(ck, "transformers"))
    UNet2DConditionModel.from_pretrained(os.path.join(ck, "diffusers"))
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id()}))
""")
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
TORCH_LOAD = "import sys, torch; torch.load(sys.argv[1])"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ck")
    for kind, mib in (("safetensors", 4), ("pt", 4), ("transformers", 16), ("diffusers", 8)):
        build(kind, root / kind, mib)
    return root


def _record(tmp, script, *args, **kw):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    (tmp / "load.py").write_text(script)
    result = record_command([PY, str(tmp / "load.py"), *map(str, args)], tmp / "t.rtrace", quiet=True, **kw)
    assert result.exit_code == 0
    return load_trace(tmp / "t.rtrace")


def _touches(trace, path_part: str) -> pd.DataFrame:
    """Read syscalls and mapping faults of the data file(s) whose path has ``path_part``."""
    reads = trace.reads[trace.reads["path"].astype(str).str.contains(path_part, regex=False) & (trace.reads["ret"] > 0)]
    pages = trace.pages[trace.pages["path"].astype(str).str.contains(path_part, regex=False)
                        & trace.pages["op"].isin(("fault", "map_pages"))]
    return pd.concat([reads[["ts_ns", "pid", "tid"]].assign(bytes=reads["ret"]),
                      pages[["ts_ns", "pid", "tid"]].assign(bytes=pages["size"])], ignore_index=True)


def _inside(touches: pd.DataFrame, rows: pd.DataFrame, same_thread: bool) -> float:
    """Share of the touches' bytes inside one of ``rows``' spans (of the same thread, or process)."""
    key = "tid" if same_thread else "pid"
    hit = np.zeros(len(touches), dtype=bool)
    for r in rows.itertuples():
        hit |= (touches[key].to_numpy() == getattr(r, key)) & (touches["ts_ns"].to_numpy() >= r.ts_ns) \
            & (touches["ts_ns"].to_numpy() <= r.end_ns)
    return float(touches["bytes"][hit].sum() / touches["bytes"].sum())


@pytest.mark.ebpf
@pytest.mark.slow
def test_real_loaders_are_attributed_to_their_entry_points(tmp_path, checkpoints):
    trace = _record(tmp_path, LOADS, checkpoints)
    calls = trace.python_calls
    by_call = {c: calls[calls["call"] == c] for c in calls["call"].unique()}
    for name in ("safetensors.torch.load_file", "torch.load", "transformers.AutoModel.from_pretrained",
                 "transformers.PreTrainedModel.from_pretrained", "diffusers.ModelMixin.from_pretrained"):
        assert name in by_call, sorted(by_call)
    # every row's times are the probes' clock: inside the recording
    assert (calls["ts_ns"] >= trace.meta["t0_ns"]).all() and (calls["end_ns"] <= trace.meta["end_ns"]).all()
    assert (calls["end_ns"] >= calls["ts_ns"]).all() and (calls["ok"] == 1).all()
    # the reads of each checkpoint happened on the loader's thread, inside its call
    assert _inside(_touches(trace, f"{checkpoints}/pt/model.pt"), by_call["torch.load"], same_thread=True) > 0.95
    st = by_call["safetensors.torch.load_file"]
    st = st[st["path"].str.endswith("safetensors/model.safetensors")]  # diffusers calls it too
    assert len(st) == 1 and st["chain"].iloc[0] == "safetensors.torch.load_file"
    assert _inside(_touches(trace, f"{checkpoints}/safetensors/model.safetensors"), st, same_thread=True) > 0.95
    assert _inside(_touches(trace, f"{checkpoints}/transformers/"), by_call["transformers.AutoModel.from_pretrained"],
                   same_thread=False) > 0.95
    assert _inside(_touches(trace, f"{checkpoints}/diffusers/"), by_call["diffusers.ModelMixin.from_pretrained"],
                   same_thread=False) > 0.95
    # the tids are the kernel's: the same as the eBPF events of those reads
    assert set(_touches(trace, f"{checkpoints}/pt/model.pt")["tid"]) <= set(by_call["torch.load"]["tid"])
    chains = set(calls["chain"])
    assert any(c.startswith("transformers.AutoModel.from_pretrained -> transformers.PreTrainedModel.from_pretrained")
               and c.endswith("safetensors.safe_open") for c in chains), chains
    assert any(c.startswith("diffusers.ModelMixin.from_pretrained -> diffusers.load_state_dict -> ") for c in chains)

    # the report: the chain that read most, and its library's lever checked against the installed version
    summary = analyze(trace).summary
    r = summary["reads_from"]
    assert r["attributed_fraction"] > 0.9 and r["bytes"] > 4 << 20
    top = r["chain"].split(".")[0]
    assert top in ("transformers", "diffusers"), r["chains"]
    library = __import__(top)
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

    method = inspect.unwrap({"transformers": PreTrainedModel, "diffusers": ModelMixin}[top].from_pretrained.__func__)
    accepts = "disable_mmap" in inspect.signature(method).parameters or "disable_mmap" in method.__code__.co_consts
    assert accepts  # transformers 5.24 and diffusers 0.42 both take it (diffusers through **kwargs)
    mine = [lv for lv in r["levers"] if lv["library"] == top]
    assert any(lv["change"].endswith("from_pretrained(..., disable_mmap=True)") for lv in mine) is accepts
    assert all(lv["version"] == library.__version__ for lv in mine)
    line = reads_from_lines(summary)[0]
    assert line.startswith(f"reads came from {r['chain']}, ") and "of data-file reads" in line
    if accepts:
        assert "disable_mmap=True" in reads_from_lines(summary)[1]

@pytest.mark.ebpf
def test_threads_on_the_lab_mount_and_the_report_line(tmp_path):
    from readtrace.workloads import make_checkpoint

    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 16)) as (mnt, _):
        trace = _record(tmp_path, THREADS, mnt / "model.safetensors")
    calls = trace.python_calls
    gets = calls[calls["call"] == "safetensors.safe_open.get_tensor"]
    assert gets["tid"].nunique() == 4
    # get_tensor maps lazily: part of the file is read inside it, the rest when .clone() uses the tensor
    assert _inside(_touches(trace, "model.safetensors"), gets, same_thread=False) > 0.25
    summary = analyze(trace).summary
    r = summary["reads_from"]
    assert r["chain"] == "safetensors.safe_open.get_tensor" and r["threads"] >= 4
    assert r["attributed_fraction"] > 0.9 and 0 < r["chain_after_return_bytes"] < r["bytes"]
    assert isinstance(r["bytes"], int) and 0.5 < r["fraction"] <= 1.0
    import safetensors.torch
    has_backend = "backend" in inspect.signature(safetensors.torch.load_file).parameters
    assert any(lv["keyword"] == "backend" for lv in r["levers"]) is has_backend
    # the findings on the checkpoint (a fresh lab mount: cold at least) name the same lever
    from readtrace.report.prose import render

    a = analyze(trace)
    on_model = [f for f in a.findings if f.file and f.file.endswith("model.safetensors") and f.severity != "info"]
    assert on_model and all(bool(f.library_levers) is has_backend for f in on_model)
    if has_backend:
        assert all('in this program: safetensors.safe_open(path, backend="pread") (safetensors '
                   in render(f).recommendation for f in on_model)
    from readtrace.report.jsonreport import report_json
    from readtrace.report.terminal import TerminalReport

    head = TerminalReport(analyze(trace)).header().plain
    assert "reads came from safetensors.safe_open.get_tensor, " in head
    assert json.loads(json.dumps(report_json(analyze(trace))["summary"]["reads_from"]))["threads"] == r["threads"]


@pytest.mark.ebpf
def test_opt_out_records_no_view(tmp_path):
    ok, why = ebpf_ready()
    require(ok, why)
    path = tmp_path / "m.pt"
    subprocess.run([PY, "-c", f"import torch; torch.save({{'w': torch.zeros(1024)}}, {str(path)!r})"], check=True)
    out = tmp_path / "t.rtrace"
    subprocess.run([PY, "-m", "readtrace", "record", "-q", "--no-python-calls", "-o", str(out), "--",
                    PY, "-c", TORCH_LOAD, str(path)], check=True)
    trace = load_trace(out)
    assert "python_calls" not in trace.meta and len(trace.python_calls) == 0
    assert analyze(trace).summary["reads_from"] is None
    assert not any("readtrace-shim" in str(p) for p in trace.files["path"])  # no hook injected


def test_ptrace_backend_records_the_same_view(tmp_path):
    import shutil

    require(shutil.which("strace") is not None, "strace missing (apt-get install strace)")
    from readtrace.ptrace.recorder import record_ptrace

    path = tmp_path / "m.pt"
    subprocess.run([PY, "-c", f"import torch; torch.save({{'w': torch.zeros(1 << 20)}}, {str(path)!r})"], check=True)
    result = record_ptrace([PY, "-c", TORCH_LOAD, str(path)], tmp_path / "t.rtrace", quiet=True, interval_s=None)
    assert result.exit_code == 0
    trace = load_trace(tmp_path / "t.rtrace")
    loads = trace.python_calls[trace.python_calls["call"] == "torch.load"]
    assert len(loads) == 1 and loads["path"].iloc[0] == str(path)
    touches = _touches(trace, "m.pt")
    assert touches["bytes"].sum() >= 4 << 20
    assert set(touches["tid"]) == set(loads["tid"])  # strace's tids are the kernel's too
    assert _inside(touches, loads, same_thread=True) > 0.95
    assert analyze(trace).summary["reads_from"]["chain"] == "torch.load"


def test_a_log_that_cannot_be_written_never_breaks_the_program(tmp_path):
    """Fail open: the wrapped loaders run and return as without readtrace."""
    from readtrace.inject.inject import shim_environment

    path = tmp_path / "m.pt"
    subprocess.run([PY, "-c", f"import torch; torch.save({{'w': torch.ones(8)}}, {str(path)!r})"], check=True)
    with shim_environment("none", None, calls_log=str(tmp_path / "missing" / "calls.jsonl")) as env:
        done = subprocess.run([PY, "-c", f"import torch; print(float(torch.load({str(path)!r})['w'].sum()), "
                                         "torch.load.__readtrace_call__)"],
                              env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["8.0", "torch.load"]


def test_innermost_call_of_nested_and_threaded_spans():
    calls = pd.DataFrame({"ts_ns": [100, 110, 130, 105], "end_ns": [200, 120, 150, 300], "pid": [1, 1, 1, 1],
                          "tid": [1, 1, 1, 2], "chain": ["a", "a -> b", "a -> c", "d"]})
    tid = np.array([1, 1, 1, 1, 1, 2, 3, 1])
    ts = np.array([99, 100, 115, 125, 150, 250, 150, 201])
    assert innermost_calls(calls, "tid", tid, ts).tolist() == [-1, 0, 1, 0, 2, 3, -1, -1]
    assert innermost_calls(calls, "pid", np.ones(2, int), np.array([250, 115])).tolist() == [3, 1]


def test_a_trace_from_before_the_view_loads_without_it(tmp_path):
    path = write_trace(tmp_path / "old.rtrace", events={"ts_ns": [1], "op": ["read"], "size": [4], "ret": [4]})
    os.unlink(path / "python_calls.parquet")
    meta = json.loads((path / META_FILE).read_text())
    del meta["rows"]["python_calls"]
    (path / META_FILE).write_text(json.dumps(meta))
    trace = load_trace(path)
    assert len(trace.python_calls) == 0 and list(trace.python_calls.columns)[:2] == ["ts_ns", "end_ns"]
    assert analyze(trace).summary["reads_from"] is None
