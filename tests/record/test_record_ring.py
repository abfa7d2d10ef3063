"""The ring buffer path under wrap-around: a 1 MiB events ring (about 10,000 records) wraps 16 times
and every record must arrive, once. Regression test: the consumer position was once written byte by
byte, so the kernel saw torn positions and refused reservations ("ring full") with the ring nearly empty.
"""

import json

import pytest
from conftest import require
from workloads import ebpf_ready, make_data_file, workload_cmd

from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf


def test_small_ring_wraps_without_losing_or_duplicating(tmp_path):
    require(*ebpf_ready())
    from readtrace.record import record_command

    data = make_data_file(tmp_path / "data.bin", 16 << 20)
    result = record_command(workload_cmd("pread_bursts", data, tmp_path / "truth.json"), tmp_path / "t.rtrace",
                            quiet=True, coalesce=False, ring_mib=1)
    calls = json.loads((tmp_path / "truth.json").read_text())["calls"]
    trace = load_trace(result.trace_path)
    assert result.exit_code == 0
    assert result.lost_events == 0, trace.meta["lost_detail"]
    preads = trace.events[(trace.events.path == str(data)) & (trace.events.op == "pread")]
    assert len(preads) == calls and (preads["count"] == 1).all()
    assert not preads.duplicated(["ts_ns", "tid"]).any()
    lookups = trace.pages[(trace.pages.path == str(data)) & (trace.pages.op == "get_pages")]
    assert int(lookups["count"].sum()) == calls and len(lookups) == calls
    assert result.events * 104 > 8 * (1 << 20)  # the 1 MiB ring wrapped at least 8 times
