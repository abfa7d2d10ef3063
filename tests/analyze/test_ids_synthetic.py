"""Kernel ids are u64 end to end: ino, FUSE nodeid and fh at 0, 2**63 and 2**64-1 survive
write -> load (full and lean) -> analyze -> report (terminal + JSON), and FUSE nodeids are matched to
files by the trace's evidence (OPEN requests, READs sent by the reading thread), never by nodeid == ino."""

import io
import json

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import (
    FUSE_CONN,
    KiB,
    files_frame,
    fuse_from_reads,
    opens,
    worker_reads,
)
from readtrace.analyze import analyze
from readtrace.report import report_json
from readtrace.report.terminal import TerminalReport
from readtrace.trace import load_trace, write_trace

TOP = 2**64 - 1
HIGH = 2**63
SHARED, SOLO = "/mnt/model/shared.safetensors", "/mnt/model/solo.safetensors"
CHUNK = 256 * KiB


def _case(ino_shared: int, ino_solo: int, node_shared: int, node_solo: int, fh_shared: int, fh_solo: int,
          with_opens: bool = True) -> dict:
    """Two files on one FUSE connection: four forked workers interleaved on one inherited handle of
    SHARED (the finding) and one sequential reader of SOLO. Both files sit on the same connection, so
    the "only FUSE file on the connection" fallback cannot hide a wrong nodeid join."""
    shared = worker_reads(4, 32, CHUNK, True)
    solo = worker_reads(1, 64, CHUNK, True, op="read", ts0=int(shared["ts_ns"].max()) + 1_000_000)
    solo = solo.assign(pid=300, tid=300, ofd=-0x55550000)
    no_ino = {"ino": np.uint64(0)}  # concat with a missing uint64 column would go through float
    events = [opens(shared, SHARED, ino=ino_shared), opens(solo, SOLO, ino=ino_solo),
              shared.assign(**no_ino), solo.assign(**no_ino)]
    events = pd.concat(events, ignore_index=True)
    events.loc[events["op"] == "open", "latency_ns"] = 5_000
    fuse = [fuse_from_reads(shared, {-0x77770000: fh_shared}, nodeid=node_shared),
            fuse_from_reads(solo, {-0x55550000: fh_solo}, nodeid=node_solo)]
    if with_opens:  # FUSE_OPEN sent by the opening thread while its open(2) is in flight
        fuse += [pd.DataFrame({"ts_ns": o["ts_ns"] + 100, "pid": o["pid"], "tid": o["tid"],
                               "connection": FUSE_CONN, "unique": 10**6 + i, "opcode": 14, "nodeid": np.uint64(node),
                               "fh": np.uint64(0),
                               "latency_ns": 1000}, index=[0])
                 for i, (o, node) in enumerate([(opens(shared, SHARED).iloc[0], node_shared),
                                                (opens(solo, SOLO).iloc[0], node_solo)])]
    files = pd.concat([files_frame(SHARED, 32 << 20, "fuse.gcsfuse", ino=ino_shared),
                       files_frame(SOLO, 16 << 20, "fuse.gcsfuse", ino=ino_solo)], ignore_index=True)
    return {"events": events, "fuse": pd.concat(fuse, ignore_index=True), "files": files,
            "meta": {"command": ["python", "load.py"], "exit_code": 0, "lost_events": 0}}


CASES = {
    # (ino shared, ino solo, nodeid shared, nodeid solo, fh shared, fh solo)
    "top": (TOP, HIGH, TOP - 1, HIGH, TOP, 0),
    "high": (HIGH, TOP, HIGH + 7, 2, HIGH, TOP),
    # each nodeid equals the OTHER file's inode number: a nodeid == ino join books every read wrongly
    "crossed": (HIGH + 5, HIGH + 9, HIGH + 9, HIGH + 5, 0, 1),
    "low": (1, 2, 1 << 40, 3, 0, 2**32),
}


@pytest.mark.parametrize("with_opens", [True, False], ids=["open-requests", "read-votes"])
@pytest.mark.parametrize("lean", [False, True], ids=["full", "lean"])
@pytest.mark.parametrize("name", list(CASES))
def test_u64_ids_through_disk_analysis_and_report(tmp_path, name, lean, with_opens):
    ino_s, ino_o, node_s, node_o, fh_s, fh_o = CASES[name]
    path = write_trace(tmp_path / "t.rtrace", **_case(*CASES[name], with_opens=with_opens))
    trace = load_trace(path, lean=lean)
    assert trace.files["ino"].dtype == np.uint64 and trace.fuse["nodeid"].dtype == np.uint64
    assert trace.files.set_index("path")["ino"].to_dict() == {SHARED: ino_s, SOLO: ino_o}
    assert set(trace.fuse["nodeid"].tolist()) == {node_s, node_o}
    assert set(trace.fuse.loc[trace.fuse["opcode"] == 15, "fh"].tolist()) == {fh_s, fh_o}

    a = analyze(trace)
    files = a.files.set_index("path")
    assert files.loc[SHARED, "ino"] == ino_s and files.loc[SOLO, "ino"] == ino_o
    assert files.loc[SHARED, "fuse_read_bytes"] == 32 << 20 and files.loc[SOLO, "fuse_read_bytes"] == 16 << 20
    handles = a.handles.assign(path=a.files["path"].reindex(a.handles["file"]).to_numpy())
    assert sorted(zip(handles["path"], handles["nodeid"].tolist(), handles["fh"].tolist(), strict=True)) == \
        sorted([(SHARED, node_s, fh_s), (SOLO, node_o, fh_o)])
    finding = [f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE"]
    assert len(finding) == 1 and finding[0].file == SHARED
    assert finding[0].evidence[0]["handle"] == fh_s and finding[0].evidence[0]["inode"] == node_s  # gcsfuse's words

    report = json.loads(json.dumps(report_json(a)))  # what --json prints, parsed back
    by_path = {f["path"]: f for f in report["files"]}
    assert by_path[SHARED]["ino"] == ino_s and by_path[SOLO]["ino"] == ino_o
    fuse_streams = {s["path"]: s["fh"] for s in report["streams"] if s["kind"] == "fuse_handle"}
    assert fuse_streams == {SHARED: fh_s, SOLO: fh_o}
    assert all(s["fh"] is None for s in report["streams"] if s["kind"] != "fuse_handle")
    shared_fd = [f for f in report["findings"] if f["code"] == "SHARED_FD_INTERLEAVE"]
    assert [f["file"] for f in shared_fd] == [SHARED] and shared_fd[0]["evidence"][0]["handle"] == fh_s
    out = io.StringIO()
    TerminalReport(a).render(out, width=200, color=False)
    assert f"SHARED_FD_INTERLEAVE  4 tasks read {SHARED}" in out.getvalue()


def test_negative_ids_are_refused_not_wrapped():
    from readtrace.trace import make_trace

    with pytest.raises((OverflowError, ValueError)):
        make_trace(fuse={"ts_ns": [1], "nodeid": [-1]})
    with pytest.raises((OverflowError, ValueError)):
        make_trace(files=pd.DataFrame({"path": ["/x"], "ino": pd.Series([-5], dtype=object)}))
