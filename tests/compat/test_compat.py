"""Real FUSE clients x real loaders, end to end through the CLI (lab.cells): record
succeeds with no lost events; the report flags the shared-handle pattern where the file system
punishes it (the knowledge table, readtrace/fs/knowledge.py) and not where it does not; fix --compare
loads identical tensors, faster where the baseline is slow, and where it is not either leaves the load
unchanged (no gain claimed) or acts on a choice a fresh cold run confirmed (>= 0.97x).
Every run of a load script writes one digest over all its tensors: all of them must agree."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from conftest import require

from lab.cells import advised_levers, run_cell
from lab.checkpoints import UNROUTED_KINDS
from lab.loaders import LOADERS, MAPPED_BYTES, TENSORS
from readtrace.analyze.storage.measured import judged
from readtrace.errors import ExitStatus

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse, pytest.mark.slow]
# the lab mount that keeps the page cache gets the loaders of safetensors/torch checkpoints (and fork_pool);
# GGUF, DCP and the raw mmap run on the mounts that drop it (below; tests/fix/test_fix_mapfill.py has GGUF on lab)
ROUTED = tuple(name for name, loader in LOADERS.items() if loader.checkpoint not in UNROUTED_KINDS)
@dataclass(frozen=True)
class Cell:
    client: str
    loader: str
    latency_ms: float = 0.0
    slow: bool = False  # the baseline is slow on reads here: the fix must gain (>= MIN_GAIN)
    no_harm_xfail: str | None = None  # why the >= 0.97x assertion is expected to fail today
    fix: bool = True  # run fix --compare in CI (False: record and report only; the matrix runs it)
    probe: bool = False  # `readtrace probe` the mount first: its measured profile (in the trace) is the truth
    from_trace: bool = False  # `fix --compare TRACE`: the checkpoint files found from the recording alone

    @property
    def id(self) -> str:
        return f"{self.client}-{self.latency_ms:g}ms-{self.loader}"


MIN_GAIN, NO_HARM = 1.3, 0.97
# The lab mount (gcsfuse profile, 20 ms first byte, where the shared-handle pattern costs) gets every
# loader; each other client the loads that tell: safetensors load_file (where wave 1's fix made loads
# slower) and a fork pool on the parent's fd (flagged only where the fs keeps a stream per handle). A
# cell is 4-10 cold loads (record, baseline, floor, auto's candidates), so CI keeps to these 14; the
# full matrix (every client x every loader) is benchmarks/compat_matrix.py.
CELLS = (
    [Cell("lab", name, 20, slow=name == "fork_pool") for name in ROUTED]
    + [Cell("s3fs", name, 20) for name in ("load_file", "fork_pool")]
    # rclone keeps a read stream per handle (flagged) and drops the page cache on every open: the start-up
    # prefetch is wasted there, an own fd per forked worker (inject/forkfd.py) is what gains
    + [Cell("rclone", "fork_pool", 20, slow=True)]
    + [Cell("sshfs", "load_file")]
    # httpdirfs serves one Range request per FUSE READ, one at a time: no candidate gains there yet, and
    # auto's cold candidates take ~10 min at 64 MiB, so CI records and reports it; fix: compat_matrix.py
    + [Cell("httpdirfs", "load_file", slow=True, fix=False)]
    + [Cell("bindfs", "fork_pool"), Cell("local", "load_file")]
    # issue 21: three clients the knowledge table did not name, judged by their measured profile. JuiceFS
    # (S3 on moto behind 20 ms, metadata in SQLite, no block cache): forked workers on one fd cost it
    # ~3x the GETs; its GGUF memmap load sits at its floor. sshfs across a 20 ms round trip (a relay).
    # squashfuse of a local image: a 4-thread mmap load at its floor.
    + [Cell("juicefs", "fork_pool", 20, probe=True), Cell("juicefs", "gguf_memmap", 20, probe=True, fix=False)]
    + [Cell("sshfs", "load_file", 20, probe=True)]
    + [Cell("squashfuse", "safe_open_threads", probe=True)]
    # issue 25: loaders readtrace does not route, on the two mounts that drop the page cache on every open
    # (a prefetch is wasted there): GGUFReader's numpy memmap and a raw mmap, 4 threads faulting one mapping,
    # populated through the loader's own open file; a DCP load (one reader, in file order). fix --compare
    # gets the trace alone and finds the checkpoint files from it. Slow (>= 1.3x asserted): the raw mmap. The
    # GGUF threads copy each tensor out with the GIL held through its faults, one fault at a time, served in
    # order (64 MiB, load 13: baselines 2.74 s lab-drop, 4.34 s rclone; populate 3.02 s and 3.51 s): no
    # harm asserted. DCP: populate fills its reader's stream; at 64 MiB it sits at its floor (gains 1.27-1.36x,
    # the most its floor allows), so no harm is asserted; at 256 MiB 2.1-2.2x (docs/compatibility.md).
    + [Cell(client, name, 20, slow=name == "raw_mmap_threads", from_trace=True)
       for client in ("lab-drop", "rclone") for name in ("gguf_memmap", "dcp_load", "raw_mmap_threads")]
)


@pytest.fixture(scope="session")
def results(checkpoints, mounts, probed, tmp_path_factory):
    """``result(cell) -> (Mounted, CellResult)``: the cell run once per session."""
    from workloads import ebpf_ready

    _, built = checkpoints
    done = {}

    def result(cell: Cell):
        if cell.id not in done:
            require(*ebpf_ready())
            mount = mounts(cell.client, cell.latency_ms)
            loader = LOADERS[cell.loader]
            checkpoint = mount.mountpoint / built[loader.checkpoint].name
            if cell.probe:
                probed(mount)  # cached: record notes it in the trace, report judges by it
            done[cell.id] = (mount, run_cell(loader, checkpoint, tmp_path_factory.mktemp(cell.id), fix=cell.fix,
                                             backing=mount.backing, floor=cell.probe, files_from_trace=cell.from_trace))
        return done[cell.id]

    return result


def by_id(cells):
    return pytest.mark.parametrize("cell", cells, ids=[c.id for c in cells])


@by_id(CELLS)
def test_record_succeeds(results, cell):
    _, r = results(cell)
    assert r.record_rc == 0, r.record_stderr
    assert r.lost_events == 0
    assert r.digests and r.digests[0]["tensors"] > 0


@by_id(CELLS)
def test_findings_follow_the_file_system(results, probed, cell):
    mount, r = results(cell)
    assert r.record_rc == 0, r.record_stderr
    # the table's prior, or where the cell probed the mount, what was measured there
    profile = judged(mount.fstype, probed(mount) if cell.probe else None)
    flagged = r.handle_findings()
    if not profile.per_handle_stream:
        # sshfs, s3fs, httpdirfs, bindfs, local: sharing a handle costs nothing; never blame it
        assert not flagged, [f["message"] for f in flagged]
    if cell.loader == "fork_pool" and profile.remote:
        # forked workers preading the parent's fd: where the fs keeps a stream per handle every miss
        # waits on it, their reads overlap and the interleave must be seen and blamed; elsewhere (s3fs
        # serves them fast) the workers may finish one after another, and any interleave is only info
        shared = [f for f in r.findings if f["code"] == "SHARED_FD_INTERLEAVE"]
        if profile.per_handle_stream:
            assert shared, ([f["code"] for f in r.findings], r.streams_line())
        if not profile.per_handle_stream:
            assert {f["severity"] for f in shared} <= {"info"}
        # HIGH needs seconds (issue 22): >= 1 s and >= 20 % of the wall over the floor
        assert all(f["cost_s"] >= 1 and f["cost_fraction"] >= 0.2 for f in shared if f["severity"] == "high")
        assert all(f["fs_family"] == profile.family for f in shared)
    if cell.loader == "dcp_load" and profile.per_handle_stream:
        # one reader in file order, but each item's zip directory read before its records: a jump back and
        # forth per item (16 at 64 MiB), each a new backend range. Named on the handle by the seconds those
        # jumps measurably waited (issue 22: they were 9 % of its requests and 3 % of its bytes).
        jumps = [f for f in r.findings if f["code"] == "RANDOM_ON_FUSE_HANDLE" and f["file"].endswith(".distcp")]
        assert jumps, ([f["code"] for f in r.findings], r.streams_line())
        assert jumps[0]["jumps"] >= 16 and jumps[0]["jump_wait_s"] >= 0.25


FIX_CELLS = [cell for cell in CELLS if cell.fix]


@by_id(FIX_CELLS)
def test_fix_loads_identical_tensors(results, cell):
    _, r = results(cell)
    assert r.fix is not None, r.fix_stderr
    # record, baseline and fixed runs of the script (a load left alone: nothing changed is run again,
    # issue 23): one digest over every tensor, all equal
    nothing_rerun = r.fix["left_alone"] and not r.fix["fixed"]["runs"]
    assert len(r.digests) >= (2 if nothing_rerun else 3)
    assert len({(d["tensors"], d["digest"]) for d in r.digests}) == 1, r.digests
    assert r.fix["exit_code"] == r.fix_rc, (r.fix["verdict"], r.fix_stderr)
    compares = LOADERS[cell.loader].compares
    if compares in (TENSORS, MAPPED_BYTES):
        assert r.fix_rc == 0, r.fix_stderr
        if nothing_rerun:  # the tensors were seen; no changed run to compare them with
            assert r.fix["tensors_identical"] is None and r.fix["tensors"] >= 1
        else:
            assert r.fix["tensors_identical"], r.fix["differing_tensors"]
    if compares == TENSORS:
        assert r.fix["tensors"] == r.digests[0]["tensors"]  # the shim saw and compared every tensor
    elif compares == MAPPED_BYTES:  # each mapping's bytes, digested in every run (readtrace.inject.mapfill)
        assert r.fix["tensors"] >= 1
    else:  # raw preads: nothing to compare, and fix --compare says so instead of claiming it
        assert r.fix_rc == ExitStatus.NO_EVIDENCE and "nothing proven" in r.fix_stderr, (r.fix_rc, r.fix_stderr)
        assert r.fix["verdict"] == "unproven" and r.fix["tensors_identical"] is None and r.fix["speedup"] is None


def _speed_cells():
    out = []
    for cell in FIX_CELLS:
        marks = [pytest.mark.xfail(reason=cell.no_harm_xfail, strict=False)] if cell.no_harm_xfail else []
        out.append(pytest.param(cell, id=cell.id, marks=marks))
    return out


@pytest.mark.parametrize("cell", _speed_cells())
def test_fix_gains_where_slow_and_does_no_harm(results, cell):
    _, r = results(cell)
    assert r.fix is not None, r.fix_stderr
    speedup, choice = r.fix["speedup"], r.fix["choice"]
    base, fixed = r.fix["baseline"]["wall_s"], r.fix["fixed"]["wall_s"]
    ran = f"fixed {fixed:.2f} s" if fixed is not None else "nothing changed ran"
    why = f"baseline {base:.2f} s, {ran}, auto chose {choice['chosen']}: {choice['why']}"
    if r.fix["verdict"] == "unproven":
        # raw preads (fork_pool): no tensors to compare, so no gain is claimed (test_fix_loads_identical_tensors);
        # the walls still say whether the fixed side gained where slow
        assert speedup is None, why
        if cell.slow:
            assert fixed is not None and base >= fixed * MIN_GAIN, why
        return
    if cell.slow:
        assert speedup is not None and speedup >= MIN_GAIN, why
    elif r.fix["left_alone"]:
        # nothing changed: the "fixed" run is the user's command again, and no gain is claimed for it
        assert speedup is None and choice["change"].startswith("nothing"), why
        assert r.fix["verdict"] in ("not-slow", "slow-no-fix"), why
        return
    # it acted: the fixed side is a fresh cold run of the choice (not the trial that won the selection),
    # and a gain is claimed only beyond the runs' spread (fix/verdict.py)
    assert r.fix["verdict"] in ("fixed", "no-gain"), f"{why}, notes: {r.fix['notes']}"
    assert speedup is None or speedup >= NO_HARM, f"{why}, notes: {r.fix['notes']}"


PROBED = [cell for cell in CELLS if cell.probe]
ADVICE_NO_HARM = 0.9  # one cold run each on a shared machine (benchmarks/prediction.py holds 0.97 side by side)


@by_id([cell for cell in PROBED if cell.fix])
def test_a_lever_the_report_advises_is_not_slower_than_the_baseline(results, cell):
    """issue 21: each lever the report advises (its predicted time on this mount gains) that fix measured
    took no longer than the baseline; where the model predicts no gain the lever is not advised."""
    _, r = results(cell)
    assert r.fix is not None, r.fix_stderr
    base = r.fix["baseline"]["wall_s"]
    for lever in advised_levers(r.findings, r.fix):
        assert lever["predicted_s"] > 0, lever
        if lever["measured_s"] is not None:
            assert base / lever["measured_s"] >= ADVICE_NO_HARM, (f"baseline {base:.2f} s", lever)


@by_id(PROBED)
def test_the_trace_records_the_measured_profile(results, probed, cell):
    mount, r = results(cell)
    measured = probed(mount)
    assert measured.seconds <= 60, measured.seconds  # issue 21: a probe in well under a minute
    assert r.record_rc == 0, r.record_stderr
    assert r.mount_profiles, "record noted no mount profile"
    assert mount.fstype in {p["fstype"] for p in r.mount_profiles}  # record notes every mounted one it has


@by_id(PROBED)
def test_no_high_finding_on_a_load_at_its_floor(results, cell):
    """issue 22: a load at its floor (the same bytes read in order, cold, by 1 or 4 own-fd readers, timed by
    the cell; the load's wait on its data files within 10 % + 1 s of it) has no HIGH finding, whatever its counters (MMAP_FAULT_STORM on
    squashfuse and on JuiceFS's GGUF memmap was HIGH)."""
    _, r = results(cell)
    assert r.record_rc == 0, r.record_stderr
    at_floor = r.at_floor()
    assert at_floor is not None, (r.data_wait_s, r.floor_s)
    high = [f"{f['code']}: {f.get('cost_s')} s" for f in r.findings if f["severity"] == "high"]
    if at_floor:
        assert not high, (f"waited {r.data_wait_s} s on the data files, floor {r.floor_s} s", high)
