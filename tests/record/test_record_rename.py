"""A file written under a temporary name, renamed, then read by its final name in one recording (what
a test that builds a model with save_pretrained and loads it sees): the trace names it by the final
name, in the files table and on every read (real eBPF)."""

import json
import os

import pytest
from conftest import require
from workloads import ebpf_ready, workload_cmd

from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf


def test_a_renamed_file_is_named_by_its_final_name(tmp_path):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    (tmp_path / "unet").mkdir()
    truth_path = tmp_path / "truth.json"
    result = record_command(workload_cmd("rename_then_read", tmp_path / "unet", truth_path), tmp_path / "t.rtrace",
                            quiet=True)
    assert result.exit_code == 0 and result.lost_events == 0
    truth = json.loads(truth_path.read_text())
    trace = load_trace(result.trace_path)
    files = trace.files
    assert truth["final"] in set(files.path) and truth["temporary"] not in set(files.path)
    calls = trace.calls()
    reads = calls[(calls.op == "pread") & (calls.ino == os.stat(truth["final"]).st_ino)]
    assert sorted(reads.offset) == truth["offsets"] and set(reads.path) == {truth["final"]}
    # the open rows keep the name each open used
    opens = trace.events[(trace.events.op == "open") & trace.events.path.str.contains("unet")]
    assert {truth["temporary"], truth["final"]} <= set(opens.path)
