"""The probes resolve fd -> struct file once per thread and cache it (probes/common.bpf.c
fd_to_file_cached): a real recording where an fd number comes to name another file between reads
(close + open, dup2, another thread's close, close_range) must name the right file for every read."""

import json

import pytest
from conftest import require
from workloads import ebpf_ready, make_data_file, workload_cmd
from workloads.known import reads_of

from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf
PAGE = 4096


def test_every_read_names_the_file_its_fd_named_then(tmp_path):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    files = [make_data_file(tmp_path / f"{name}.bin", 64 * PAGE) for name in "abc"]
    truth_path = tmp_path / "truth.json"
    result = record_command(workload_cmd("fd_reuse", *files, truth_path), tmp_path / "t.rtrace", quiet=True)
    assert result.exit_code == 0 and result.lost_events == 0
    truth = json.loads(truth_path.read_text())
    trace = load_trace(result.trace_path)
    calls = trace.calls()
    for path in files:
        expected = sorted((tid, off) for p, tid, off in truth["reads"] if p == str(path))
        got = calls[calls.path == str(path)]
        assert sorted(zip(got.tid, got.offset, strict=True)) == expected, path
        assert (got["size"] == PAGE).all()
    # the first two reads of a merge into one run; the reads of b that continue a's offsets (often
    # through a reused struct file address) do not
    a_rows = reads_of(trace, files[0]).sort_values("ts_ns")
    assert list(zip(a_rows.offset, a_rows["count"], strict=True)) == [(0, 2), (5 * PAGE, 1), (6 * PAGE, 1)]
