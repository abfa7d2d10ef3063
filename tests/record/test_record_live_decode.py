"""A recording longer than LIVE_DECODE_S decodes its spool while the command runs and lets the
decoder forget the history no later record needs (record/session.py): real eBPF, a real loop of
open / pread / close that reuses struct file addresses; every read must still name its file."""

import json

import pytest
from conftest import require
from workloads import ebpf_ready, make_data_file, workload_cmd

from readtrace.record import decode, session
from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf
PAGE = 4096


def test_live_decoding_keeps_history_bounded_and_every_read_named(tmp_path, monkeypatch):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    monkeypatch.setattr(session, "LIVE_DECODE_S", 0.3)
    monkeypatch.setattr(session, "LIVE_CHUNK_RECORDS", 1000)
    kept_rows = []
    forget = decode.Decoder.forget_before

    def counting_forget(self, ts_ns):
        forget(self, ts_ns)
        kept_rows.append(sum(len(f) for f in self._ofd_files))

    monkeypatch.setattr(decode.Decoder, "forget_before", counting_forget)
    files = [make_data_file(tmp_path / f"{name}.bin", 64 * PAGE) for name in "abc"]
    truth_path = tmp_path / "truth.json"
    result = record_command(workload_cmd("reopen_loop", *files, truth_path, 3), tmp_path / "t.rtrace", quiet=True)
    assert result.exit_code == 0 and result.lost_events == 0
    meta = json.loads((result.trace_path / "meta.json").read_text())
    truth = json.loads(truth_path.read_text())["reads"]
    assert len(truth) > 500 and meta["live_decoded_records"] > 0 and len(kept_rows) >= 2
    # the history after each pass: the struct files in force (the interpreter's own opens among them)
    # and what was opened since, not one row per open of the loop
    assert max(kept_rows) < len(truth) / 4, kept_rows
    calls = load_trace(result.trace_path).calls()
    for path in files:
        expected = sorted((tid, off) for p, tid, off in truth if p == str(path))
        got = calls[(calls.path == str(path)) & (calls.op == "pread")]
        assert sorted(zip(got.tid, got.offset, strict=True)) == expected, path
