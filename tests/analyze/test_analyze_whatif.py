"""What-if storage model on synthetic traces with hand-checked answers, and the --what-if CLI."""

import json

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import FUSE_CONN, NODE, files_frame, load_case
from readtrace.analyze import analyze
from readtrace.analyze.storage.whatif import mount_profile, profile, what_if
from readtrace.analyze.views.timesplit import union_by_group, union_ns
from readtrace.cli import main
from readtrace.trace import FUSE_READ, make_trace, write_trace

MiB = 1 << 20


def predict(case, *profiles):
    return {p.profile: p for p in what_if(analyze(make_trace(**load_case(case))), list(profiles))}


def test_shared_handle_pays_a_first_byte_per_request_on_gcsfuse_only():
    # 4 tasks take turns on one handle: 256 requests of 256 KiB, every one a seek for gcsfuse,
    # served one at a time (the handle's lock): 256 x 20 ms; fixed (fix's prefetch): 4 handles of a
    # 16 MiB share each, one range each, in parallel: 20 ms
    p = predict("shared", profile("gcsfuse", 20), profile("nfs", 20), profile("prefetch", 20))
    g = p["gcsfuse"]
    assert g.backend_requests == 256 and g.predicted_io_s == pytest.approx(5.12)
    assert g.fixed_backend_requests == 4 and g.predicted_fixed_io_s == pytest.approx(0.02)
    assert g.fixed_strategy == "prefetch" and g.startup_s == 0.0  # no recording start: nothing hidden
    assert g.predicted_s == pytest.approx(g.predicted_io_s, abs=1e-3)  # the synthetic load only waited
    # nfs: no handle state; each task's 64 requests one after another, the 4 tasks in parallel
    assert p["nfs"].backend_requests == 256 and p["nfs"].predicted_io_s == pytest.approx(64 * 0.02)
    # a prefetcher restarts its 1 MiB window at every jump: 256 windows, ~4x the bytes fetched (none past
    # the file's end: the reads at 63.25, 63.5 and 63.75 MiB fetch 0.75, 0.5 and 0.25 MiB)
    assert p["prefetch"].backend_requests == 256 and p["prefetch"].bytes_fetched == 256 * MiB - 3 * MiB // 2


def test_own_handles_run_in_parallel_and_sequential_nfs_pays_every_request():
    own = predict("own", profile("gcsfuse", 20))["gcsfuse"]
    assert own.backend_requests == 4 and own.predicted_io_s == pytest.approx(0.02) and own.streams == 4
    seq = predict("sequential", profile("gcsfuse", 20), profile("nfs", 20), profile("local-nvme"))
    assert seq["gcsfuse"].backend_requests == 1 and seq["gcsfuse"].predicted_io_s == pytest.approx(0.02)
    assert seq["nfs"].predicted_io_s == pytest.approx(256 * 0.02)
    # fixed: 4 prefetch streams of 16 MiB, each 16 requests of 1 MiB with 8 in flight
    assert seq["nfs"].predicted_fixed_io_s == pytest.approx(16 * 0.02 / 8)
    assert seq["local-nvme"].predicted_io_s < 0.05


def test_the_fixed_prefetch_hides_in_the_start_up_before_the_first_read():
    """fix's prefetch starts with the interpreter: what fits before the load's first data read is
    hidden; the rest the load waits for. The own-fd loader is a candidate only for routed loads."""
    case = load_case("shared")
    first = int(case["events"]["ts_ns"].min())
    for startup_ms, waited in ((10, 0.01), (1000, 0.0)):
        case["meta"] = {**case["meta"], "t0_ns": first - startup_ms * 1_000_000}
        g = what_if(analyze(make_trace(**case)), [profile("gcsfuse", 20)])[0]
        assert g.startup_s == pytest.approx(startup_ms / 1000, abs=1e-3)
        assert g.fixed_strategy == "prefetch" and g.predicted_fixed_io_s == pytest.approx(waited, abs=1e-3)


def test_bandwidth_bounds_a_phase():
    g = predict("own", profile("gcsfuse", 0, bandwidth_mbps=64 * MiB / 1e6))["gcsfuse"]
    assert g.predicted_io_s == pytest.approx(1.0)  # 64 MiB over a 64 MiB/s link, whatever the parallelism


def test_mount_costs_measured_from_the_handles_service_times():
    # one handle, sequential: every 8th request opens a range (21 ms), the others continue (1 ms)
    n, size = 64, 128 * 1024
    lat = np.where(np.arange(n) % 8 == 0, 21_000_000, 1_000_000)
    ts = np.r_[0, np.cumsum(lat)[:-1]]
    offset = size * np.arange(n) + (np.arange(n) // 8) * size  # a gap every 8 requests: a new range
    fuse = pd.DataFrame({"ts_ns": ts, "pid": 9, "tid": 9, "connection": FUSE_CONN, "unique": np.arange(n),
                         "opcode": FUSE_READ, "nodeid": NODE, "fh": 3, "offset": offset, "size": size,
                         "reply_bytes": size, "latency_ns": lat})
    a = analyze(make_trace(fuse=fuse, files=files_frame("/mnt/g/m", 1 << 30, "fuse.gcsfuse")))
    p = mount_profile(a)
    assert p.name == "gcsfuse" and p.request_ms == pytest.approx(1.0) and p.latency_ms == pytest.approx(20.0)
    assert a.summary.prediction.predicted_fixed_s is not None and a.summary.prediction.mount_profile == "gcsfuse"


def test_findings_carry_the_fixed_prediction():
    a = analyze(make_trace(**load_case("shared")))
    f = next(f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE")
    assert f.predicted_fixed_s == pytest.approx(a.summary.prediction.predicted_fixed_s) and f.wait_s > 0


def test_unions():
    s, e = np.array([0, 5, 20, 1]), np.array([10, 12, 30, 2])
    assert union_ns(s, e) == 22
    assert list(union_by_group(s, e, np.array([0, 0, 1, 1]), 2)) == [12, 11]


def test_cli_what_if_json_and_errors(tmp_path, capsys):
    trace = write_trace(tmp_path / "s.rtrace", **load_case("shared"))
    assert main(["report", str(trace), "--what-if", "gcsfuse,nfs,local-nvme", "--latency-ms", "20", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = {r["profile"]: r for r in d["what_if"]}
    assert set(rows) == {"gcsfuse", "nfs", "local-nvme"}
    for r in rows.values():
        for key in ("predicted_s", "predicted_fixed_s", "backend_requests", "bytes_fetched", "latency_ms"):
            assert key in r
    assert rows["gcsfuse"]["backend_requests"] == 256 and rows["gcsfuse"]["latency_ms"] == 20
    wall, io = d["summary"]["wall_s"], d["summary"]["io_wait_s"]
    assert rows["gcsfuse"]["predicted_s"] == pytest.approx(wall - d["summary"]["data_wait_s"] + rows["gcsfuse"]["predicted_io_s"])
    assert d["summary"]["data_wait_s"] <= io + 1e-9
    assert main(["report", str(trace), "--what-if", "gcsfuse"]) == 0
    assert "What if" in capsys.readouterr().out
    for args in (["--what-if", "tape"], ["--latency-ms", "3"], ["--what-if", "nfs", "--bandwidth-mbps", "0"]):
        assert main(["report", str(trace), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
