"""The host<->child contract (readtrace.rerun.protocol) and what the injected code may import."""

from __future__ import annotations

import json
import subprocess
import sys

from readtrace.rerun.environment import shim_environment
from readtrace.rerun.protocol import Rerun, append_manifest, prefetches, routes


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
    append_manifest(path, [{"event": "call", "n": 1}])
    append_manifest(path, [{"event": "tensor", "name": "w"}, {"event": "call", "n": 2}])
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
