"""fix --compare under torchrun: per-rank manifests, the rank plan (each rank's own byte spans, or the
files split over local ranks), and a real 4-rank job on the lab mount, recorded, compared rank by rank."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import fuse_available, require, validate_fix_json
from workloads import free_port, torchrun_cmd

from readtrace.inject.manifest import Manifest, compare_manifests, read_manifest
from readtrace.rerun.protocol import append_manifest
from readtrace.rerun.rankplan import SPANS, SPLIT, RankPlan, plan_from_spans
from readtrace.rerun.records import Tensor

MiB = 1 << 20
WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "rank_load.py"


def _file(tmp_path, size=8 * MiB) -> str:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\0" * size)
    return str(path)


def test_every_rank_reading_all_of_the_file_splits_it_over_local_ranks(tmp_path):
    f = _file(tmp_path)
    plan = plan_from_spans({r: [(f, 0, 8 * MiB)] for r in range(4)}, [f])
    assert plan.mode == SPLIT
    shares = [plan.pieces(r, r, 4) for r in range(4)]
    assert [p for share in shares for p in share] == [(f, i * 2 * MiB, (i + 1) * 2 * MiB) for i in range(4)]


def test_ranks_reading_different_spans_prefetch_only_their_own(tmp_path):
    f = _file(tmp_path)
    spans = {0: [(f, 0, 100), (f, 4096 + 10, 3 * MiB)], 1: [(f, 3 * MiB, 5 * MiB + 1)],
             2: [(f, 6 * MiB, 6 * MiB + 10), (f, 7 * MiB + 8193, 8 * MiB)]}
    plan = plan_from_spans(spans, [f])
    assert plan.mode == SPANS
    assert plan.spans[0] == ((f, 0, 3 * MiB),)  # page-aligned, the 4 KiB gap merged
    assert plan.spans[1] == ((f, 3 * MiB, 5 * MiB + 4096),)
    assert plan.spans[2] == ((f, 6 * MiB, 6 * MiB + 4096), (f, 7 * MiB + 8192, 8 * MiB))  # > 1 MiB apart
    assert plan.pieces(3, 3, 4) == []  # a rank the trace did not see: reads for itself
    again = RankPlan.load(_saved(plan, tmp_path))
    assert again == plan and again.bytes_by_rank()[1] == 2 * MiB + 4096
    assert plan_from_spans({0: [("/elsewhere", 0, 10)]}, [f]) is None


def _saved(plan, tmp_path) -> Path:
    path = tmp_path / "plan.json"
    plan.save(path)
    return path


def test_manifest_records_carry_the_rank_and_ranks_are_compared_apart(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    for rank, digests in ((0, "a"), (1, "b")):
        monkeypatch.setenv("RANK", str(rank))
        append_manifest(path, [Tensor(file="f", name="w", dtype="float32", shape=(1,), sha256=digests)])
    baseline = read_manifest(path)
    assert [t.rank for t in baseline.tensors] == [0, 1]
    swapped = Manifest([replace(t, rank=1 - t.rank) for t in baseline.tensors], [])
    diff = compare_manifests(baseline, swapped)  # the same multiset of tensors, on the wrong ranks
    assert not diff.all_identical and diff.differing == ["w (f, rank 0)", "w (f, rank 1)"]


@pytest.mark.ebpf
@pytest.mark.fuse
@pytest.mark.slow
def test_four_rank_sharded_job_compared_rank_by_rank(tmp_path):
    """torchrun --nproc_per_node 4, each rank loading its own quarter of the tensors through the lab
    mount: the baseline's trace gives each rank's spans, the fixed runs prefetch only those, and
    every rank loads the same tensors in both runs."""
    from readtrace.fix.compare import compare
    from readtrace.fix.compare_report import render_table, to_json
    from readtrace.fix.runs import default_recorder
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    require(os.geteuid() == 0, "recording needs root")
    require(*fuse_available())
    ckpt = make_checkpoint(tmp_path / "bucket", 24)[0]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    recorder, why_not = default_recorder()
    assert recorder is not None, why_not
    cmd = torchrun_cmd(4, free_port(), WORKLOAD, mnt / ckpt.name, "--shard")
    try:
        with mount(ckpt.parent, mnt, profile="gcsfuse", latency_ms=5, keep_cache=True) as m:
            result = compare(cmd, strategy="prefetch", recorder=recorder, workdir=tmp_path / "work")
            reads = m.requests()
    finally:
        force_unmount(mnt)
    data = validate_fix_json(json.loads(json.dumps(to_json(result))))  # what --json prints
    assert data["tensors_identical"] and not data["unproven"], data
    ranks = data["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["identical"] and r["tensors"] > 0 for r in ranks), ranks
    assert all(r["baseline"]["digest"] == r["fixed"]["digest"] for r in ranks)
    assert len({r["baseline"]["digest"] for r in ranks}) == 4  # a sharded load: each rank its own tensors
    assert sum(r["tensors"] for r in ranks) == data["tensors"]
    assert data["job"]["identical_on_every_rank"] and data["job"]["ranks"] == 4
    plan = data["rank_plan"]
    assert plan["mode"] == SPANS, plan
    size = ckpt.stat().st_size
    for r in ranks:  # each rank prefetched its spans: about a quarter of the file, not all of it
        planned = plan["bytes_by_rank"][str(r["rank"])]
        assert r["fixed"]["prefetched_bytes"] == planned and planned < 0.6 * size, (r, planned)
        assert r["baseline"]["span_bytes"] <= planned + 2 * MiB
    assert sum(plan["bytes_by_rank"].values()) >= 0.9 * size
    assert len(reads) > 0
    text = _rendered(result, render_table)
    assert "per rank" in text and "identical on every rank" in text
    assert sum(line.lstrip().split(" ")[0] in "0123" for line in text.splitlines() if "identical" in line) == 4


def _rendered(result, render_table) -> str:
    import io

    out = io.StringIO()
    render_table(result, out)
    return out.getvalue()


@pytest.mark.slow
def test_fix_compare_of_a_recorded_job_prefetches_the_spans_its_rank_read(tmp_path):
    """`readtrace fix --compare TRACE`: the trace's rank 0 read only the first half of the checkpoint,
    so in the fixed run rank 0's start-up prefetch reads that half and nothing else."""
    import subprocess

    import pandas as pd

    from readtrace.trace import write_trace
    from readtrace.workloads import make_checkpoint

    ckpt = make_checkpoint(tmp_path / "ckpt", 8)[0]
    size = ckpt.stat().st_size
    half = size // 2 // MiB * MiB
    rows = [{"ts_ns": 10**9 + off, "pid": 100, "tid": 100, "op": "pread", "fd": 3, "ofd": 1, "path": str(ckpt),
             "dev": 8, "ino": 2, "offset": off, "size": MiB, "ret": MiB, "latency_ns": 10**6}
            for off in range(0, half, MiB)]
    files = [{"path": str(ckpt), "dev": 8, "ino": 2, "size": size, "fstype": "ext4", "mountpoint": "/"}]
    command = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "safetensors-default", str(ckpt)]
    meta = {"command": command, "cwd": str(tmp_path), "t0_ns": 10**9, "wall_s": 1.0,
            "ranks": {"100": {"rank": 0, "local_rank": 0, "world_size": 1}}}
    trace = write_trace(tmp_path / "job.rtrace", meta=meta, events=pd.DataFrame(rows), files=pd.DataFrame(files))
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    done = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--strategy", "prefetch",
                           "--no-record", "--json", str(trace)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    data = validate_fix_json(json.loads(done.stdout))
    assert data["rank_plan"]["mode"] == SPANS and data["rank_plan"]["bytes_by_rank"] == {"0": half}
    [rank] = data["ranks"]
    assert rank["rank"] == 0 and rank["identical"] and rank["fixed"]["prefetched_bytes"] == half
    assert rank["baseline"]["prefetched_bytes"] == 0 and data["tensors_identical"]


@pytest.mark.slow
def test_two_ranks_reading_all_of_it_split_the_prefetch(tmp_path):
    """torchrun --nproc_per_node 2, every rank load_file()s the whole checkpoint, runs not recorded:
    the plan splits the file over the two local ranks; each prefetches its half, once for the node."""
    from readtrace.fix.compare import compare
    from readtrace.fix.compare_report import to_json
    from readtrace.workloads import make_checkpoint

    ckpt = make_checkpoint(tmp_path / "ckpt", 8)[0]
    cmd = torchrun_cmd(2, free_port(), WORKLOAD, ckpt)
    data = validate_fix_json(to_json(compare(cmd, strategy="prefetch", recorder=None, workdir=tmp_path / "work")))
    assert data["tensors_identical"] and data["job"]["identical_on_every_rank"], data
    assert data["rank_plan"]["mode"] == SPLIT
    halves = [r["fixed"]["prefetched_bytes"] for r in data["ranks"]]
    assert sum(halves) == ckpt.stat().st_size and all(h > 0.3 * sum(halves) for h in halves), halves
    assert len({r["baseline"]["digest"] for r in data["ranks"]}) == 1  # every rank loaded the same tensors
    assert sorted(os.listdir(tmp_path / "work" / "02-fixed.jsonl.prefetched")) == ["0", "1"]  # both shares done
