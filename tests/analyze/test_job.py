"""Jobs of several ranks and nodes: rank labels from the environment, traces of several nodes joined.

The lab: two "nodes" as two torchrun launches (--nnodes 2, gloo on CPU, rendezvous on 127.0.0.1),
each under its own ``readtrace record``, each reading the same checkpoint through its own lab mount,
both mounts on one shared bandwidth limit (the shared file system).
Known answers: 4 ranks (0-1 on node 0, 2-3 on node 1), each reading the whole file; both nodes
fetched it from the mount (REPLICATED_READS, about 2x the file).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import fuse_available, require
from workloads import free_port, torchrun_cmd

from lab.synthetic import job_node
from readtrace.analyze.job.analysis import analyze_job, node_workers
from readtrace.errors import TraceError
from readtrace.record.ranks import parse_environ
from readtrace.report.jobreport import job_json
from readtrace.simfs.log import aggregate_rate
from readtrace.trace import load_trace, make_trace, write_trace

SHARED_MBPS = 100.0  # the lab's shared file system: one bandwidth for both nodes' mounts
WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "rank_load.py"


def test_rank_variables_parsed_from_an_environment_block():
    env = b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=4\0LOCAL_WORLD_SIZE=2\0RANKX=9\0"
    assert parse_environ(env) == {"rank": 3, "local_rank": 1, "world_size": 4, "local_world_size": 2}
    assert parse_environ(b"PATH=/bin\0LOCAL_RANK=1\0") is None  # no RANK: not a rank
    assert parse_environ(b"RANK=abc\0") is None


def _node_trace(host: str, start: str, pids_ranks: dict[int, int], wall_s: float, path: str, size: int):
    """A node's trace: each ranked pid reads the whole file through the FUSE mount in 1 MiB preads."""
    return make_trace(**job_node(host, start, pids_ranks, wall_s, path, size))


def test_two_synthetic_nodes_replicated_reads_and_a_straggler():
    size = 8 << 20
    a = _node_trace("n0", "2026-12-01T10:00:00+00:00", {100: 0, 101: 1}, 10.0, "/mnt/a/model.safetensors", size)
    b = _node_trace("n1", "2026-12-01T10:00:02.5+00:00", {200: 2, 201: 3}, 30.0, "/gcs/model.safetensors", size)
    job = analyze_job([a, b])
    assert list(job.node_rows["host"]) == ["n0", "n1"]
    assert job.node_rows["start_offset_s"].tolist() == [0.0, 2.5]
    assert sorted(job.ranks["rank"]) == [0, 1, 2, 3]
    assert (job.ranks["span_bytes"] == size).all() and (job.ranks["bytes_read"] == size).all()
    assert all(n.summary.replicated_rank_bytes == size for n in job.nodes)  # 2 ranks read each byte
    rep = [f for f in job.findings if f.code == "REPLICATED_READS"]
    assert len(rep) == 1 and rep[0].nodes == 2 and rep[0].file_bytes == size
    assert rep[0].aggregate_bytes == 4 * size  # 4 ranks each fetched it (no shared cache on the mount)
    skew = [f for f in job.findings if f.code == "LOAD_SKEW" and f.scope == "node"]
    assert len(skew) == 1 and skew[0].slowest.startswith("n1") and skew[0].skew == pytest.approx(1.5)


def test_node_traces_without_ranks_are_still_a_job():
    """Two plain (not torchrun) node traces: no rank table, the node straggler still found (a
    KeyError on the empty rank table before)."""
    size = 4 << 20
    traces = [_node_trace(f"n{i}", "2026-12-01T10:00:00+00:00", {100 + i: i}, 5.0 + 10 * i,
                          "/mnt/a/model.safetensors", size) for i in range(2)]
    for t in traces:
        del t.meta["ranks"]
    job = analyze_job(traces)
    assert len(job.ranks) == 0 and len(job.nodes) == 2
    skew = [f for f in job.findings if f.code == "LOAD_SKEW"]
    assert [f.scope for f in skew] == ["node"] and skew[0].slowest.startswith("n1")


def test_nodes_on_local_disks_replicate_nothing():
    size = 4 << 20
    a = _node_trace("n0", "2026-12-01T10:00:00+00:00", {100: 0}, 5.0, "/data/model.safetensors", size)
    b = _node_trace("n1", "2026-12-01T10:00:00+00:00", {200: 1}, 5.0, "/data/model.safetensors", size)
    for t in (a, b):
        t.files["fstype"] = "ext4"
    assert not [f for f in analyze_job([a, b]).findings if f.code == "REPLICATED_READS"]


def _written(trace, path: Path) -> Path:
    """The in-memory trace written to disk."""
    return write_trace(path, meta=trace.meta, events=trace.events, files=trace.files)


def _same_json(job) -> dict:
    return json.loads(json.dumps(job_json(job)))


def test_node_traces_analysed_in_workers_give_the_same_job(tmp_path):
    """Paths go to worker processes: the job is the one of the same traces analysed here, in order."""
    size = 8 << 20
    traces = [_node_trace(f"n{i}", f"2026-12-01T10:00:0{i}+00:00", {100 + i: i}, 10.0 + 10 * i,
                          "/mnt/a/model.safetensors", size) for i in range(3)]
    paths = [_written(t, tmp_path / f"node{i}.rtrace") for i, t in enumerate(traces)]
    here = _same_json(analyze_job([load_trace(p, lean=True) for p in paths]))
    assert node_workers(paths) == 1  # a small job: a worker's start would cost more than its analysis
    parallel = _same_json(analyze_job(paths, workers=2))
    assert parallel == here == _same_json(analyze_job(paths, workers=1))
    assert [Path(n["trace"]).name for n in parallel["nodes"]] == ["node0.rtrace", "node1.rtrace", "node2.rtrace"]
    assert {f["code"] for f in parallel["findings"]} == {"REPLICATED_READS", "LOAD_SKEW"}


def test_node_workers_as_memory_allows(tmp_path):
    small = _written(_node_trace("n0", "2026-12-01T10:00:00+00:00", {100: 0}, 5.0, "/data/m", 1 << 20),
                     tmp_path / "a.rtrace")
    big, huge = tmp_path / "b.rtrace", tmp_path / "c.rtrace"
    for path, rows in ((big, 2_000_000), (huge, 10**13)):  # 0.7 GB and ~2 PB of analysis
        path.mkdir()
        (path / "meta.json").write_text(json.dumps({"rows": {"events": rows}}))
    assert node_workers([small, big]) == min(2, os.cpu_count())
    assert node_workers([small, huge]) == 1 and node_workers([big]) == 1


def test_a_broken_node_trace_is_a_missing_node_of_a_partial_job(tmp_path):
    """A node trace that cannot be read costs its node, not the report: the others are reported, the
    missing one is named (JSON ``missing``, one report line, one stderr line, exit 4)."""
    good = _written(_node_trace("n0", "2026-12-01T10:00:00+00:00", {100: 0}, 5.0, "/data/m", 1 << 20),
                    tmp_path / "a.rtrace")
    bad = _written(_node_trace("n1", "2026-12-01T10:00:00+00:00", {200: 1}, 5.0, "/data/m", 1 << 20),
                   tmp_path / "b.rtrace")
    (bad / "events.parquet").write_bytes(b"not parquet")
    for workers in (1, 2):
        job = _same_json(analyze_job([good, bad], workers=workers))
        assert [n["trace"] for n in job["nodes"]] == [str(good)] and job["partial"] is True
        assert [m["trace"] for m in job["missing"]] == [str(bad)]
        assert job["missing"][0]["error"].startswith("corrupt trace: events.parquet")
    with pytest.raises(TraceError, match="no node trace of the job could be analysed: .*b.rtrace: corrupt"):
        analyze_job([bad, bad], workers=1)
    report = subprocess.run([sys.executable, "-m", "readtrace", "report", str(good), str(bad), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 4, report
    assert json.loads(report.stdout)["missing"][0]["trace"] == str(bad)
    assert len(report.stderr.strip().splitlines()) == 1 and "b.rtrace" in report.stderr
    text = subprocess.run([sys.executable, "-m", "readtrace", "report", str(good), str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 4 and "1 nodes, 1 missing: a partial job" in text.stdout, text
    [line] = [line for line in text.stdout.splitlines() if "MISSING_NODE" in line]
    assert line.startswith(f"[HIGH] MISSING_NODE  {bad}: not analysed: corrupt trace: events.parquet"), line


@pytest.mark.ebpf
@pytest.mark.fuse
@pytest.mark.slow
def test_two_nodes_two_ranks_each_recorded_merged_and_reported(tmp_path):
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    require(os.geteuid() == 0, "recording needs root")
    require(*fuse_available())
    ckpt = make_checkpoint(tmp_path / "bucket", 16)[0]
    port = free_port()
    mounts = [tmp_path / f"mnt{n}" for n in range(2)]
    for mnt in mounts:
        mnt.mkdir()
    procs = []
    try:
        # one shared file system: both nodes' mounts draw on one link of SHARED_MBPS
        link = {"profile": "gcsfuse", "latency_ms": 0.0, "bandwidth_mbps": SHARED_MBPS,
                "shared_link": f"job-{os.getpid()}"}
        with mount(ckpt.parent, mounts[0], **link) as m0, mount(ckpt.parent, mounts[1], **link) as m1:
            for n, mnt in enumerate(mounts):
                cmd = [sys.executable, "-m", "readtrace", "record", "-o", str(tmp_path / f"node{n}.rtrace"), "--",
                       *torchrun_cmd(2, port, WORKLOAD, mnt / ckpt.name, nnodes=2, node_rank=n)]
                env = {**os.environ, "OMP_NUM_THREADS": "1"}
                procs.append(subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
            outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for mnt in mounts:
            force_unmount(mnt)
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out
    assert sum(out.count("same on every rank: True") for out in outputs) == 4, outputs
    moved, seconds = aggregate_rate([m0.requests(), m1.requests()])
    assert moved >= 1.8 * ckpt.stat().st_size  # each node fetched the file through its own mount
    assert moved / seconds <= 1.1 * SHARED_MBPS * 1e6, (moved, seconds)  # together, within the one limit

    report = subprocess.run([sys.executable, "-m", "readtrace", "report", str(tmp_path / "node0.rtrace"),
                             str(tmp_path / "node1.rtrace"), "--json"], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert [Path(n["trace"]).name for n in data["nodes"]] == ["node0.rtrace", "node1.rtrace"]
    assert all(n["host"] == socket.gethostname() for n in data["nodes"])
    ranks = pd.DataFrame(data["ranks"])
    assert sorted(ranks["rank"]) == [0, 1, 2, 3]
    assert sorted(ranks[ranks["node"] == 0]["rank"]) == [0, 1]  # node_rank 0 holds global ranks 0-1
    assert (ranks["world_size"] == 4).all()
    size = ckpt.stat().st_size
    # every rank read the whole data section (its header too): its spans cover about the file
    # every rank touched the whole file (faults, or pages its node's other rank had brought in)
    assert np.all(ranks["span_bytes"] >= 0.9 * size), ranks
    assert all(s["replicated_rank_bytes"] >= 0.9 * size for s in data["node_summaries"])
    rep = [f for f in data["findings"] if f["code"] == "REPLICATED_READS"]
    assert len(rep) == 1 and rep[0]["nodes"] == 2 and rep[0]["file"].endswith(ckpt.name)
    assert rep[0]["aggregate_bytes"] >= 1.8 * size
    # the two nodes analysed in two worker processes: the same job as the report's (one after the other)
    assert data == _same_json(analyze_job([tmp_path / "node0.rtrace", tmp_path / "node1.rtrace"], workers=2))

    text = subprocess.run([sys.executable, "-m", "readtrace", "report", str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "REPLICATED_READS" in text.stdout and "2 nodes" in text.stdout


def test_report_of_a_directory_without_traces_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    r = subprocess.run([sys.executable, "-m", "readtrace", "report", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "no .rtrace trace in it" in r.stderr and "Traceback" not in r.stderr
