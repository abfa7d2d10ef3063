"""Issue 24: crafted or damaged inputs of every kind readtrace reads give their documented exit code and
one line on stderr: never a traceback, never a hang (every case runs under a timeout)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from conftest import require
from workloads import ebpf_ready

from lab.synthetic import load_case
from readtrace.errors import ExitStatus
from readtrace.trace import write_trace
from reliability.conftest import one_line, readtrace


@pytest.mark.parametrize("src, mnt", [("d", "d"), ("d", "d/sub"), ("d/sub", "d"), ("d", "link")],
                         ids=["same", "mnt-inside-src", "src-inside-mnt", "mnt-links-to-src"])
def test_simfs_refuses_overlapping_source_and_mount_point(need_fuse, tmp_path, leftovers, src, mnt):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "d")
    p = readtrace(["simfs", src, mnt], cwd=tmp_path, env=leftovers.env, timeout=60)
    assert p.returncode == ExitStatus.USAGE, p.stderr
    assert "overlap" in one_line(p.stderr)


def _meta_edit(edit):
    def damage(trace: Path) -> None:
        meta = trace / "meta.json"
        meta.write_text(edit(meta.read_text()))
    return damage


def _replace_with(name: str, make):
    def damage(trace: Path) -> None:
        (trace / name).unlink()
        make(trace / name)
    return damage


def _overwrite(name: str, data: bytes):
    def damage(trace: Path) -> None:
        (trace / name).write_bytes(data)
    return damage


def _truncate(name: str, size: int):
    def damage(trace: Path) -> None:
        with open(trace / name, "r+b") as f:
            f.truncate(size)
    return damage


def _flip_bytes(name: str):
    def damage(trace: Path) -> None:
        data = bytearray((trace / name).read_bytes())
        rng = random.Random(1)
        for _ in range(50):
            data[rng.randrange(8, len(data) - 8)] = rng.randrange(256)
        (trace / name).write_bytes(bytes(data))
    return damage


DEEP = "[" * 100_000 + "]" * 100_000
DAMAGED_TRACES = {
    "fifo-as-parquet": (_replace_with("events.parquet", os.mkfifo), "events.parquet is not a regular file"),
    "fifo-as-meta": (_replace_with("meta.json", os.mkfifo), "meta.json is not a regular file"),
    "directory-as-parquet": (_replace_with("files.parquet", os.mkdir), "files.parquet is not a regular file"),
    "deep-json": (_meta_edit(lambda s: s[:-2] + ', "x": ' + DEEP + "}"), "nested too deeply"),
    "deep-json-alone": (_meta_edit(lambda s: DEEP), "nested too deeply"),
    "huge-integer": (_meta_edit(lambda s: s.replace('"lost_events": 0', '"lost_events": ' + "9" * 5000)),
                     "corrupt meta.json"),
    "infinite-number": (_meta_edit(lambda s: s.replace('"lost_events": 0', '"lost_events": 1e999')),
                        "corrupt meta.json"),
    "nan": (_meta_edit(lambda s: s.replace('"lost_events": 0', '"lost_events": NaN')), "corrupt meta.json"),
    "nan-rows": (_meta_edit(lambda s: s.replace('"files": 1', '"files": NaN')), "corrupt meta.json"),
    "nul-in-command": (_meta_edit(lambda s: s.replace('"load.py"', '"lo\\u0000ad.py"')), "NUL"),
    "truncated-parquet": (_truncate("events.parquet", 100), "corrupt trace"),
    "garbage-parquet": (_overwrite("events.parquet", random.Random(2).randbytes(3000)), "corrupt trace"),
    "damaged-parquet-footer": (_flip_bytes("files.parquet"), "files.parquet"),
}


@pytest.mark.parametrize("command", ["report", "fix"])
@pytest.mark.parametrize("case", list(DAMAGED_TRACES))
def test_a_damaged_trace_is_one_line_exit_4(tmp_path, leftovers, case, command):
    damage, said = DAMAGED_TRACES[case]
    trace = write_trace(tmp_path / "t.rtrace", **load_case("shared"))
    damage(Path(trace))
    args = ["report", "t.rtrace"] if command == "report" else ["fix", "--compare", "--no-record", "t.rtrace"]
    p = readtrace(args, cwd=tmp_path, env=leftovers.env, timeout=60)
    if command == "fix" and p.returncode == 0 and case in ("truncated-parquet", "garbage-parquet",
                                                            "damaged-parquet-footer", "fifo-as-parquet"):
        pytest.fail(f"fix ran a command from a damaged trace: {p.stderr}")
    assert p.returncode == ExitStatus.BAD_TRACE, p.stderr
    assert said in one_line(p.stderr)


@pytest.mark.parametrize("option", [["--latency-ms", "nan"], ["--latency-ms", "inf"], ["--latency-ms", "-1"],
                                    ["--latency-ms", "1e400"], ["--bandwidth-mbps", "nan"],
                                    ["--bandwidth-mbps", "inf"], ["--bandwidth-mbps", "0"]])
def test_what_if_numbers_out_of_range_are_usage_errors(tmp_path, option):
    write_trace(tmp_path / "t.rtrace", **load_case("shared"))
    p = readtrace(["report", "t.rtrace", "--what-if", "gcsfuse", *option], cwd=tmp_path, timeout=60)
    assert p.returncode == ExitStatus.USAGE, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and option[0] in p.stderr.strip().splitlines()[-1]


def test_record_sample_interval_must_be_a_finite_number(tmp_path):
    p = readtrace(["record", "--sample-ms", "nan", "--", "true"], cwd=tmp_path, timeout=60)
    assert p.returncode == ExitStatus.USAGE and "--sample-ms" in p.stderr.strip().splitlines()[-1], p.stderr


GARBAGE_LOG = [
    "{" * 100_000, "[" * 50_000, '{"timestamp":{"seconds":1e999},"message":"<- ReadFile (inode 2, PID 7, handle 1, '
    'offset 0, 4 bytes)"}', '{"timestamp":{"seconds":NaN},"message":"x ReadFile"}',
    '{"timestamp":{"seconds":' + "9" * 5000 + '},"message":"ReadFile"}', '{"timestamp":"bad","message":"ReadFile"}',
    "connection.go:420] <- ReadFile (inode 99999999999999999999999999, PID 1, handle 1, offset 5, 4096 bytes)",
    "connection.go:420] <- ReadFile (inode 2, PID 77, handle 1, offset 0, " + "9" * 400 + " bytes)",
    "Op 0x" + "f" * 40 + " connection.go:420] <- ReadFile (inode 2, PID 77, handle 1, offset 0, 4096 bytes)",
    "\x00\x00 ReadFile \x00", '{"message": 5, "timestamp": []} ReadFile',
]
GOOD_LINE = "Op 0x00000010 connection.go:420] <- ReadFile (inode 2, PID 77, handle 1, offset 0, 262144 bytes)"


def test_a_daemon_log_with_garbage_lines_imports_the_good_ones(tmp_path):
    (tmp_path / "gcsfuse.log").write_text("\n".join([*GARBAGE_LOG, GOOD_LINE]) + "\n")
    p = readtrace(["import", "gcsfuse", "gcsfuse.log", "-o", "g.rtrace"], cwd=tmp_path, timeout=60)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "1 ReadFile requests" in p.stderr and "malformed ReadFile line(s) skipped" in p.stderr


def test_a_daemon_log_of_only_garbage_is_bad_input(tmp_path):
    (tmp_path / "gcsfuse.log").write_text("\n".join(GARBAGE_LOG) + "\n")
    p = readtrace(["import", "gcsfuse", "gcsfuse.log", "-o", "g.rtrace"], cwd=tmp_path, timeout=60)
    assert p.returncode == ExitStatus.BAD_INPUT and "no gcsfuse ReadFile lines" in one_line(p.stderr), p.stderr


@pytest.mark.ebpf
def test_force_onto_a_directory_whose_meta_is_a_fifo_refuses_without_blocking(tmp_path, leftovers):
    require(*ebpf_ready())
    (tmp_path / "t.rtrace").mkdir()
    os.mkfifo(tmp_path / "t.rtrace" / "meta.json")
    p = readtrace(["record", "-q", "-f", "-o", "t.rtrace", "--", "true"], cwd=tmp_path, env=leftovers.env,
                  timeout=60)
    assert p.returncode == ExitStatus.ERROR and "not a readtrace trace" in one_line(p.stderr), p.stderr
