"""The English of findings is rendered in report/ from their figures: a few lines compared whole."""

from lab.synthetic import load_case
from readtrace.analyze import analyze
from readtrace.analyze.rules.types import ColdCache, SmallRequests
from readtrace.report.prose import render
from readtrace.report.units import fmt_seconds, fmt_top
from readtrace.trace import make_trace

MiB = 1 << 20


def test_shared_fd_interleave_lines():
    f = next(f for f in analyze(make_trace(**load_case("shared"))).findings if f.code == "SHARED_FD_INTERLEAVE")
    f.wait_s = f.cost_s = f.predicted_fixed_s = None  # the timing suffix: the next test
    p = render(f)
    assert p.message == (
        "4 tasks read /mnt/model/model.safetensors through one FUSE handle on fuse.gcsfuse: every task >= 100% "
        "consecutive on its own, the merged stream 0% consecutive (100% of bytes out of order), score 1.00; "
        "gcsfuse replay: 256 backend requests vs 1 for one sequential reader")
    assert p.evidence[0] == "ReadFile (inode 2, PID 101, handle 1, offset 0, 262144 bytes)"
    assert p.evidence[8] == "task 101: 100% consecutive, 100% sequential on its own, 16 MiB from offset 0 to 16777216"
    assert p.recommendation.startswith("open one fd per worker") and "--sequential-read-size-mb" in p.recommendation


def test_timing_and_top_sizes_render_from_numbers():
    f = SmallRequests("warn", file="/n/f", fstype="nfs4", remote=True, small=2056, reads=2056, small_bytes=MiB,
                      median_bytes=4096, top_sizes=[[4096, 2056]], fs_levers="nfs: rsize")
    assert render(f).evidence[1] == "top sizes: 4 KiB x 2,056"
    f.wait_s, f.predicted_fixed_s = 41.83, 2.1
    assert render(f).message.endswith("; the load waited 41.8 s on this file; fixed: ~2.1 s predicted on this mount")
    cold = ColdCache("warn", files=1, miss_bytes=4 * MiB, bytes_read=4 * MiB, miss_fraction=1.0,
                     evidence=[{"path": "/d/f", "miss_bytes": 4 * MiB, "bytes_read": 4 * MiB}])
    assert render(cold).message == ("the load read 4 MiB from 1 file(s); the kernel fetched 4 MiB from storage into "
                                    "the page cache for them (100% of what was read): the load ran cold")
    assert render(cold).evidence == ["/d/f: read 4 MiB, fetched 4 MiB into the page cache"]
    # issue 22: read-ahead fetched more than was read: two quantities, said apart, no "106 MiB of 3.19 MiB"
    ahead = ColdCache("warn", files=1, miss_bytes=106 * MiB, bytes_read=3 * MiB, miss_fraction=1.0)
    assert render(ahead).message == (
        "the load read 3 MiB from 1 file(s); the kernel fetched 106 MiB from storage into the page cache for them "
        "(35.3x what was read: read-ahead fetched pages the program did not use): the load ran cold")
    assert fmt_top([[4096, 2056], [8192, 3]]) == "4 KiB x 2,056, 8 KiB x 3" and fmt_seconds(0.0123) == "12.3 ms"


def test_cost_wording_cause_and_how_it_shows():
    """A cause says its seconds, the wall share, the wait and the floor; what shows it names the cause."""
    f = SmallRequests("high", file="/n/f", fstype="nfs4", remote=True, small=20, reads=20, small_bytes=MiB,
                      median_bytes=4096, wait_s=10.5, cost_s=9.8, cost_fraction=0.72, floor_s=0.7,
                      floor_model="nfs model, 1 ms first byte")
    assert render(f).message.endswith(
        "; costs 9.8 s (72% of the wall): the load waited 10.5 s on this file, reading the same bytes in order "
        "takes ~700 ms there (nfs model, 1 ms first byte)")
    f.floor_s, f.cost_s = None, 10.5
    assert "no storage model knows nfs4: its floor is unknown, all of that wait is counted" in render(f).message
    shows = ColdCache("info", files=1, miss_bytes=MiB, bytes_read=MiB, cause="SMALL_REQUESTS",
                      role="precondition", cost_s=0.0, wait_s=10.5, predicted_fixed_s=1.0)
    assert render(shows).message.endswith("; how SMALL_REQUESTS shows (precondition): its seconds are counted there")


def test_the_large_read_lever_is_named_in_the_mapped_files_own_format():
    """A GGUF memmap on JuiceFS was told to use safetensors' backend="pread" (issue 21's real clients)."""
    from readtrace.analyze.rules.types import MmapFaultStorm

    def lever(path):
        return render(MmapFaultStorm("warn", file=path, fstype="fuse.juicefs", faults=512, tasks=4)).recommendation

    assert 'backend="pread"' in lever("/m/model.safetensors")
    assert "torch.load(..., mmap=False)" in lever("/m/model.pt")
    gguf = lever("/m/model.gguf")
    assert "safetensors" not in gguf and "readinto() of 16 MiB chunks" in gguf
