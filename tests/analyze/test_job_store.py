"""A job whose node traces lie in an object store (moto's S3 server on 127.0.0.1), reported here and on a
Dask cluster (a scheduler and workers as processes on 127.0.0.1): the same JSON, and a node that is
lost (an unreadable trace, a killed worker) is named, never the report lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from lab.servers import DaskCluster, MotoServer
from lab.synthetic import job_node
from readtrace.trace import load_trace, write_trace
from readtrace.trace.location import COMPLETE_MARKER
from readtrace.trace.upload import upload_trace

BUCKET = "jobs"
NODES = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """moto's S3 server with a 4-node job uploaded by readtrace (s3://jobs/job/nodeN.rtrace) and the
    same traces on disk; the environment that reaches it (credentials and endpoint, the AWS way)."""
    import boto3

    work = tmp_path_factory.mktemp("store")
    with MotoServer(work / "moto.log") as s3:
        env = {"AWS_ACCESS_KEY_ID": s3.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": s3.SECRET_KEY,
               "AWS_ENDPOINT_URL": s3.url, "AWS_REGION": s3.REGION}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            client = boto3.client("s3", endpoint_url=s3.url, region_name=s3.REGION)
            client.create_bucket(Bucket=BUCKET)
            local = work / "job"
            for n in range(NODES):
                frames = job_node(f"node{n}", f"2026-12-01T10:00:0{n}+00:00", {100 + 2 * n: 2 * n, 101 + 2 * n: 2 * n + 1},
                                  10.0 + 10 * (n == 3), "/mnt/ckpt/model.safetensors", 8 << 20)
                path = write_trace(local / f"node{n}.rtrace", **frames)
                upload_trace(path, f"s3://{BUCKET}/job/node{n}.rtrace")
            yield {"env": env, "local": local, "client": client, "url": s3.url, "work": work}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="module")
def cluster(store):
    """A scheduler and 2 workers that read the store with their own environment; a task whose worker
    dies fails at once (allowed-failures 0) instead of being run again elsewhere."""
    env = {**store["env"], "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    with DaskCluster(store["work"] / "dask", workers=2, env=env) as c:
        yield c


def _report(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "readtrace", "report", *args], capture_output=True, text=True,
                          timeout=timeout, env={k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"})


def _named(report: dict, where: str) -> dict:
    """The report with each trace named by its base name (a local directory's and a prefix's compared)."""
    return json.loads(json.dumps(report).replace(where.rstrip("/") + "/", ""))


def test_a_trace_in_the_store_reads_as_on_disk(store):
    here = load_trace(store["local"] / "node1.rtrace", lean=True)
    there = load_trace(f"s3://{BUCKET}/job/node1.rtrace", lean=True)
    assert there.path == f"s3://{BUCKET}/job/node1.rtrace" and there.meta == here.meta
    assert there.reads.equals(here.reads) and there.files.equals(here.files)


def test_job_in_the_store_on_dask_is_the_local_job(store, cluster):
    """report s3://.../job/ on the cluster == the local pool on the same URLs == the traces on disk."""
    local_disk = _report(str(store["local"]), "--json")
    local_store = _report(f"s3://{BUCKET}/job/", "--json")
    on_dask = _report(f"s3://{BUCKET}/job/", "--json", "--scheduler", cluster.address)
    for r in (local_disk, local_store, on_dask):
        assert r.returncode == 0, r.stderr
    dask_json = json.loads(on_dask.stdout)
    assert [n["trace"] for n in dask_json["nodes"]] == [f"s3://{BUCKET}/job/node{n}.rtrace" for n in range(NODES)]
    assert dask_json == json.loads(local_store.stdout)
    assert _named(dask_json, f"s3://{BUCKET}/job/") == _named(json.loads(local_disk.stdout), str(store["local"]))
    assert dask_json["partial"] is False and dask_json["missing"] == []
    assert {f["code"] for f in dask_json["findings"]} == {"REPLICATED_READS", "LOAD_SKEW"}
    assert len(dask_json["ranks"]) == 2 * NODES
    # DASK_SCHEDULER_ADDRESS names the cluster just as well
    env = dict(os.environ, DASK_SCHEDULER_ADDRESS=cluster.address)
    by_env = subprocess.run([sys.executable, "-m", "readtrace", "report", f"s3://{BUCKET}/job/", "--json"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert json.loads(by_env.stdout) == dask_json


def test_an_unreadable_node_trace_is_named_in_a_partial_job(store, cluster):
    """A node trace changed after its upload (its size is not the marker's) and one never finished
    (no marker): both named, the other two reported."""
    client = store["client"]
    for n in range(NODES):
        upload_trace(store["local"] / f"node{n}.rtrace", f"s3://{BUCKET}/broken/node{n}.rtrace")
    client.put_object(Bucket=BUCKET, Key="broken/node1.rtrace/events.parquet", Body=b"not parquet")
    client.delete_object(Bucket=BUCKET, Key=f"broken/node2.rtrace/{COMPLETE_MARKER}")
    for args in ((), ("--scheduler", cluster.address)):
        r = _report(f"s3://{BUCKET}/broken/", "--json", *args)
        assert r.returncode == 4, r
        out = json.loads(r.stdout)
        assert [n["trace"] for n in out["nodes"]] == [f"s3://{BUCKET}/broken/node{n}.rtrace" for n in (0, 3)]
        assert out["partial"] is True
        missing = {m["trace"].rsplit("/", 1)[-1]: m["error"] for m in out["missing"]}
        assert set(missing) == {"node1.rtrace", "node2.rtrace"}, missing
        assert missing["node1.rtrace"].startswith("incomplete trace: events.parquet is 11 bytes, the upload's marker")
        assert missing["node2.rtrace"].startswith(f"incomplete trace (no {COMPLETE_MARKER} marker")
        assert r.stderr.count("\n") == 1 and "node1.rtrace" in r.stderr and "node2.rtrace" in r.stderr


def test_a_worker_killed_mid_job_leaves_a_report_naming_its_node(store, tmp_path):
    """One big node (3 M events: seconds of analysis) and three small ones on 2 workers; the worker
    analysing the big node is killed (SIGKILL) while it does: the report names that node (and any other
    its worker held), the others are there."""
    from distributed import Client

    big = write_trace(tmp_path / "node0.rtrace", **job_node("node0", "2026-12-01T10:00:00+00:00", {100: 0},
                                                            10.0, "/mnt/ckpt/model.safetensors", 3_000_000 << 20))
    upload_trace(big, f"s3://{BUCKET}/killed/node0.rtrace")
    for n in range(1, NODES):
        upload_trace(store["local"] / f"node{n}.rtrace", f"s3://{BUCKET}/killed/node{n}.rtrace")
    env = {**store["env"], "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    with DaskCluster(tmp_path / "dask", workers=2, env=env) as c, \
            Client(c.address, set_as_default=False) as client:
        pids = {addr: c.workers[int(str(w["name"]).removeprefix("w"))].pid
                for addr, w in client.scheduler_info()["workers"].items()}
        report = subprocess.Popen([sys.executable, "-m", "readtrace", "report", f"s3://{BUCKET}/killed/", "--json",
                                   "--scheduler", c.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            victim, deadline = None, time.monotonic() + 120
            while victim is None and time.monotonic() < deadline:
                for addr, keys in client.call_stack().items():
                    if any(str(k).endswith("-0") for k in keys):
                        victim = addr
                time.sleep(0.05)
            assert victim is not None, "the big node's task never ran"
            os.kill(pids[victim], signal.SIGKILL)
            out, err = report.communicate(timeout=300)
        finally:
            if report.poll() is None:
                report.kill()
                report.wait()
    assert report.returncode == 4, err
    job = json.loads(out)
    # the nodes whose tasks the killed worker held (the big one among them) are named; the rest reported
    missing = [m["trace"] for m in job["missing"]]
    reported = [n["trace"] for n in job["nodes"]]
    assert f"s3://{BUCKET}/killed/node0.rtrace" in missing and reported, job["missing"]
    assert sorted(missing + reported) == [f"s3://{BUCKET}/killed/node{n}.rtrace" for n in range(NODES)]
    assert all(m["error"].startswith("KilledWorker: ") for m in job["missing"])
    assert f"partial job: {len(missing)} of 4 node traces not analysed" in err
    shutil.rmtree(tmp_path / "dask", ignore_errors=True)


@pytest.mark.ebpf
def test_record_to_the_store_uploads_a_whole_trace(store, tmp_path):
    """record -o s3://... records here, uploads, leaves nothing behind; the trace reads back; a second
    record to the same URL is refused before its command runs; --upload keeps the local trace too."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    load = f"open({str(data)!r}, 'rb').read()"
    work = tmp_path / "cwd"
    work.mkdir()
    url = f"s3://{BUCKET}/rec/node0.rtrace"
    r = subprocess.run([sys.executable, "-m", "readtrace", "record", "-o", url, "--", sys.executable, "-c", load],
                       cwd=work, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "uploaded " in r.stderr and url in r.stderr and list(work.iterdir()) == []
    keys = sorted(o["Key"] for o in store["client"].list_objects_v2(Bucket=BUCKET, Prefix="rec/")["Contents"])
    assert {f"rec/node0.rtrace/{COMPLETE_MARKER}", "rec/node0.rtrace/meta.json", "rec/node0.rtrace/events.parquet"} \
        <= set(keys)
    assert not [k for k in keys if ".uploading-" in k]
    trace = load_trace(url, lean=True)
    assert trace.meta["command"] == [sys.executable, "-c", load]
    assert str(data) in set(trace.files["path"])
    report = _report(url, "--json")
    assert report.returncode == 0 and json.loads(report.stdout)["trace"] == url, report.stderr

    marker = tmp_path / "ran"
    again = subprocess.run([sys.executable, "-m", "readtrace", "record", "-o", url, "--", "touch", str(marker)],
                           cwd=work, capture_output=True, text=True, timeout=180)
    assert again.returncode == 2 and "--force" in again.stderr and not marker.exists(), again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    kept = subprocess.run([sys.executable, "-m", "readtrace", "record", "-q", "-o", "local.rtrace", "--upload",
                           f"s3://{BUCKET}/rec2/", "--", sys.executable, "-c", load],
                          cwd=work, capture_output=True, text=True, timeout=180)
    assert kept.returncode == 0 and kept.stderr == "", kept.stderr
    assert (work / "local.rtrace" / "meta.json").exists()
    assert load_trace(f"s3://{BUCKET}/rec2/local.rtrace").meta == load_trace(work / "local.rtrace").meta


def test_an_upload_replaces_only_an_unfinished_trace_without_force(store):
    """The target of an upload: an upload that never finished (files, no marker) is replaced; a whole
    trace only with force; a prefix holding other objects never."""
    from readtrace.errors import UsageError

    client, local = store["client"], store["local"] / "node0.rtrace"
    client.put_object(Bucket=BUCKET, Key="retry/node0.rtrace/events.parquet", Body=b"cut off")
    upload_trace(local, f"s3://{BUCKET}/retry/node0.rtrace")
    assert load_trace(f"s3://{BUCKET}/retry/node0.rtrace").meta == load_trace(local).meta
    with pytest.raises(UsageError, match="a trace is already there"):
        upload_trace(local, f"s3://{BUCKET}/retry/node0.rtrace")
    upload_trace(local, f"s3://{BUCKET}/retry/node0.rtrace", force=True)
    client.put_object(Bucket=BUCKET, Key="other/node0.rtrace/notes.txt", Body=b"mine")
    with pytest.raises(UsageError, match="holds other objects"):
        upload_trace(local, f"s3://{BUCKET}/other/node0.rtrace", force=True)
    assert client.get_object(Bucket=BUCKET, Key="other/node0.rtrace/notes.txt")["Body"].read() == b"mine"
