"""The host<->child contract (readtrace.rerun.protocol) and what the injected code may import."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

from readtrace.rerun.environment import shim_environment
from readtrace.rerun.protocol import Rerun, append_manifest, prefetches, routes
from readtrace.rerun.records import LoaderCall, Tensor


def test_round_trip_through_the_environment():
    rerun = Rerun(strategy="both", manifest="/tmp/m.jsonl", device="cuda:1", prefetch_files=("/a b", "/c"),
                  chunk_mib=8.5, threads=3, prefetch_threads=2, prefetch_pin_s=0.0, prefetch_distributed=False)
    env = rerun.to_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["READTRACE_FIX"] == "both" and env["READTRACE_PREFETCH_DIST"] == "0"
    assert Rerun.from_env(env) == rerun
    assert Rerun().to_env({}) == {}  # defaults are not written


def test_stale_and_bad_values():
    stale = {"READTRACE_MANIFEST": "/old", "READTRACE_PREFETCHED": "/x", "HOME": "/root"}
    assert Rerun(strategy="prefetch").to_env(stale) == {"HOME": "/root", "READTRACE_FIX": "prefetch"}
    # the child never fails over a value it cannot parse: the default stands
    got = Rerun.from_env({"READTRACE_FIX": "fast", "READTRACE_THREADS": "many", "READTRACE_CHUNK_MB": "4"})
    assert (got.strategy, got.threads, got.chunk_mib, got.active) == ("none", None, 4.0, False)


def test_prefetch_decided_once():
    assert [s for s in ("none", "prefetch", "own-fd", "both", "auto") if prefetches(s)] == ["prefetch", "both", "auto"]
    assert [s for s in ("none", "prefetch", "own-fd", "both") if routes(s)] == ["own-fd", "both"]
    files = ("/m.safetensors",)
    assert Rerun(strategy="own-fd", prefetch_files=files).start_prefetch() == ()
    assert Rerun(strategy="both", prefetch_files=files).start_prefetch() == files
    assert Rerun(strategy="both", prefetch_files=files, prefetched=files).start_prefetch() == ()  # a parent did


def test_export_for_children():
    env = {"READTRACE_FIX": "both", "READTRACE_PREFETCH_FILES": "/a", "OTHER": "1"}
    Rerun(strategy="both", prefetch_files=("/a",), prefetched=("/a",)).export(env)
    assert env == {"READTRACE_FIX": "both", "READTRACE_PREFETCH_FILES": "/a", "READTRACE_PREFETCHED": "/a",
                   "OTHER": "1"}


def test_shim_environment_keeps_the_users_tuning(tmp_path):
    base = {"READTRACE_CHUNK_MB": "4", "READTRACE_DEVICE": "cuda", "READTRACE_PREFETCHED": "/stale"}
    with shim_environment("both", tmp_path / "m.jsonl", base_env=base, prefetch_files=["/f"]) as env:
        rerun = Rerun.from_env(env)
    assert (rerun.chunk_mib, rerun.device, rerun.prefetched, rerun.prefetch_files) == (4.0, None, (), ("/f",))
    assert rerun.manifest == str(tmp_path / "m.jsonl") and rerun.readtrace_path


def test_append_manifest_is_one_line_per_record(tmp_path):
    path = tmp_path / "m.jsonl"
    call = LoaderCall(call="load_file", file="f", strategy="none", seconds=1.0, tensors=1, pid=1)
    append_manifest(path, [call])
    append_manifest(path, [Tensor(file="f", name="w", dtype="uint8", shape=(1,)), replace(call, seconds=2.0)])
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == ["call", "tensor", "call"]


def test_injected_code_imports_only_the_loader_and_standard_library_helpers():
    code = ("import sys, readtrace.inject.shim, readtrace.inject.startup;"
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('readtrace.')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # inject (itself), rerun (the contract), loader (the own-fd loader), and the standard-library-only pagecache, fs and lazy
    assert set(json.loads(out.stdout.replace("'", '"'))) <= {"errors", "fs", "inject", "lazy", "loader", "pagecache", "rerun"}


def test_the_fix_host_does_not_import_torch():
    """`readtrace fix -- CMD` runs CMD after the host's imports: torch there cost every fixed load
    ~1.5 s before the command even started. The host reads and compares manifests without it."""
    code = "import sys, readtrace.commands.fix, readtrace.fix.compare, readtrace.inject.manifest; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# One line of each kind as the child writes it (and wrote it before the records were typed).
LINES = [
    '{"event":"tensor","file":"/m/a.safetensors","name":"w","dtype":"float32","shape":[2,3],"sha256":null}',
    '{"event":"tensor","file":"/m/a.safetensors","name":"w[0:1]","dtype":"float32","shape":[1,3],"tensor":"w",'
    '"index":[{"slice":[0,1,null]}],"sha256":"ab","rank":1}',
    '{"event":"call","call":"torch.load","file":"/m/a.pt","strategy":"none","seconds":0.5,"tensors":2,'
    '"digest_seconds":0.1,"pid":7,"lever":"torch-load-no-mmap","mmap":true,"fallback":"no GPU","error":"E: x",'
    '"nested":true}',
    '{"event":"call","call":"import:transformers","strategy":"none","seconds":0.0,"tensors":0,"pid":7}',
    '{"event":"call","call":"prefetch","strategy":"both","seconds":0.0,"error":"no such file","pid":7}',
    '{"event":"call","call":"prefetch","file":"/m/a:/m/b","strategy":"both","seconds":1.5,"bytes":10,"tensors":0,'
    '"background":false,"nested":false,"pinned_bytes":0,"pin_note":"","pid":7,"rank":0}',
    '{"event":"call","call":"populate","file":"/m/a","strategy":"populate","how":"reopened","seconds":1.0,'
    '"bytes":5,"tensors":0,"nested":true,"pid":8,"note":"stopped: the load ended first"}',
    '{"event":"call","call":"early read","file":"/m/a","seconds":1.0,"bytes":5,"waited_s":0.5,"strategy":"own-fd",'
    '"tensors":0,"nested":true,"pid":7}',
    '{"event":"call","call":"mmap","file":"/m/a","seconds":0.0,"strategy":"none","tensors":0,"nested":true,"pid":7}',
    '{"event":"call","call":"mapped bytes","file":"/m/a","strategy":"none","seconds":0.0,"tensors":1,'
    '"digest_seconds":0.2,"nested":true,"pid":7}',
    '{"event":"call","call":"fork:shared-fd","file":"/m/a","fd":3,"when":"fork","reopened":false,"seconds":0.0,'
    '"nested":true,"pid":9}',
    '{"event":"unproven","reason":"readtrace\'s populate failed","pid":7}',
]


def test_manifest_lines_read_back_to_records_that_write_the_same_lines():
    from readtrace.rerun.records import Call, Tensor, Unproven, manifest_line, read_records

    records = list(read_records([line + "\n" for line in LINES], "m.jsonl"))
    assert [manifest_line(r) for r in records] == [line + "\n" for line in LINES]
    assert [type(r) for r in records[:2]] == [Tensor, Tensor] and isinstance(records[-1], Unproven)
    assert all(isinstance(r, Call) for r in records[2:-1])
    mmap = records[8]
    assert (mmap.call, mmap.file, mmap.bytes, mmap.fallback) == ("mmap", "/m/a", None, None)  # a kind's missing field


def test_a_cut_off_last_line_ends_the_records_unproven_and_a_corrupt_one_is_an_error():
    import pytest

    from readtrace.rerun.records import CorruptManifest, Unproven, read_records

    *_, last = read_records([LINES[0] + "\n", '{"event":"ten'], "m.jsonl")
    assert isinstance(last, Unproven) and last.reason == "m.jsonl:2: the manifest's last line is cut off (a write failed)"
    with pytest.raises(CorruptManifest, match="m.jsonl:1: corrupt manifest line"):
        list(read_records(["{\n", LINES[0] + "\n"], "m.jsonl"))
