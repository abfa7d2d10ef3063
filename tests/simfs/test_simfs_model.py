"""The gcsfuse per-handle reader model on known access sequences (pure, no mount)."""

from readtrace.simfs.model import HandleReader, MiB, stateless_plan


def plans(reader, reads):
    return [reader.plan(offset * MiB, size * MiB) for offset, size in reads]


def test_consecutive_reads_share_one_stream():
    got = plans(HandleReader(64 * MiB), [(0, 1), (1, 1), (2, 1), (3, 1)])
    assert [p.new_request for p in got] == [True, False, False, False]
    assert not any(p.seek for p in got)
    assert {p.range_end for p in got} == {64 * MiB}


def test_small_forward_skip_is_read_through():
    reader = HandleReader(64 * MiB)
    first, skip = plans(reader, [(0, 1), (5, 1)])
    assert not skip.new_request and not skip.seek
    assert skip.transfer_bytes == 5 * MiB  # 4 MiB skipped + 1 MiB read


def test_backward_and_far_jumps_are_seeks_then_random_ranges():
    reader = HandleReader(64 * MiB)
    got = plans(reader, [(0, 1), (1, 1), (2, 1), (3, 1), (0, 1), (40, 1), (41, 1), (42, 1), (43, 1)])
    assert [p.new_request for p in got] == [True, False, False, False, True, True, False, False, True]
    assert [p.seek for p in got] == [False] * 4 + [True, True] + [False] * 3
    # 5 MiB read over 2 seeks: 2.5 MiB per seek, rounded up to 3 MiB ranges.
    assert got[5].mode == "random" and got[5].range_end == 43 * MiB
    assert got[8].range_end == 48 * MiB  # now 8 MiB over 2 seeks: 4 MiB -> 5 MiB ranges
    assert reader.seeks == 2


def test_big_reads_per_seek_stay_sequential():
    reader = HandleReader(1024 * MiB)
    got = plans(reader, [(0, 16), (100, 16), (300, 16), (600, 16)])
    assert all(p.mode == "sequential" for p in got)
    assert got[-1].range_end == 800 * MiB  # 200 MiB sequential ranges


def test_read_past_range_end_opens_a_new_request_without_a_seek():
    reader = HandleReader(400 * MiB)
    got = plans(reader, [(0, 100), (100, 100), (200, 1)])
    assert [p.new_request for p in got] == [True, False, True]
    assert not any(p.seek for p in got)


def test_reads_at_or_past_eof_cost_nothing():
    reader = HandleReader(2 * MiB)
    plan = reader.plan(2 * MiB, MiB)
    assert not plan.new_request and plan.transfer_bytes == 0


def test_stateless_every_request_is_a_backend_request():
    assert stateless_plan(0, MiB).new_request and not stateless_plan(0, MiB).seek
