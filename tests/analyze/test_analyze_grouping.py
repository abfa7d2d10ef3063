"""The vectorized primitives against plain-Python references on random inputs (hypothesis)."""

from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.synthetic import files_frame
from readtrace.analyze import analyze
from readtrace.analyze.views import grouping
from readtrace.analyze.views.grouping import (
    dense_codes,
    max_overlap,
    one_value,
    same_partition,
    sorted_sum,
    take,
    top_values,
    top_values_sorted,
    union_length,
)
from readtrace.trace import make_trace

intervals = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200), st.integers(1, 50)), min_size=1,
                     max_size=60)


def _union_reference(rows, n):
    covered = [set() for _ in range(n)]
    for g, start, length in rows:
        covered[g].update(range(start, start + length))
    return [len(c) for c in covered]


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_union_length_matches_reference(rows):
    rows_sorted = sorted(rows, key=lambda r: (r[0], r[1]))
    g = np.array([r[0] for r in rows_sorted])
    start = np.array([r[1] for r in rows_sorted])
    end = start + np.array([r[2] for r in rows_sorted])
    assert union_length(g, 4, start, end).tolist() == _union_reference(rows, 4)
    with mock.patch.object(grouping, "BLOCK", 3):  # the in-place pass block by block
        assert union_length(g, 4, start, end).tolist() == _union_reference(rows, 4)
    one = sorted(rows, key=lambda r: r[1])  # every interval in one group, its codes one value broadcast
    start = np.array([r[1] for r in one])
    end = start + np.array([r[2] for r in one])
    assert union_length(one_value(np.zeros(len(one), np.int64)), 1, start, end).tolist() == \
        [sum(_union_reference([(0, s, n) for _, s, n in rows], 1))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 3)), min_size=1, max_size=80))
def test_per_group_passes_of_few_groups_match_the_vectorized_ones(rows):
    """top values counted per group (block by block) and sums of flags per group equal the passes over
    every row at once."""
    rows = sorted(rows, key=lambda r: r[0])
    codes, _ = dense_codes(np.array([r[0] for r in rows]))
    values = np.array([r[1] for r in rows], dtype=np.int64)
    n = int(codes.max()) + 1
    starts = np.searchsorted(codes, np.arange(n))
    counts = np.diff(starts, append=len(codes))
    with mock.patch.object(grouping, "BLOCK", 4):
        assert top_values_sorted(starts, counts, values) == top_values(codes, n, values)
    flags = values > 0
    assert sorted_sum(starts, flags).tolist() == np.add.reduceat(flags, starts, dtype=np.int64).tolist()
    assert take(one_value(np.full(len(values), 7)), flags).tolist() == [7] * int(flags.sum())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=30))
def test_max_overlap_matches_reference(spans):
    g = np.array([s[0] for s in spans])
    a = np.array([min(s[1], s[2]) for s in spans])
    b = np.array([max(s[1], s[2]) for s in spans])
    expected = [0, 0, 0]
    for k in range(3):
        mine = [(x, y) for gg, x, y in zip(g, a, b, strict=True) if gg == k]
        for t in sorted({x for x, _ in mine}):
            expected[k] = max(expected[k], sum(1 for x, y in mine if x <= t <= y))
    assert max_overlap(g, 3, a, b).tolist() == expected  # closed intervals


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40))
def test_dense_codes_and_partitions(pairs):
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    codes, n = dense_codes(a, b)
    assert n == len(set(pairs))
    assert len({(x, y, c) for x, y, c in zip(a, b, codes, strict=True)}) == n  # one code per pair
    ca, na = dense_codes(a)
    assert same_partition(ca, na, *dense_codes(a * 7 + 1))
    assert same_partition(codes, n, ca, na) == (n == na)


reads_strategy = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 64), st.integers(1, 16)), min_size=1,
                          max_size=50)


@settings(max_examples=60, deadline=None)
@given(reads_strategy)
def test_task_fractions_match_a_python_loop(rows):
    """Per task: consecutive / sequential fractions, byte-weighted, computed the slow obvious way."""
    ev = pd.DataFrame({"ts_ns": np.arange(len(rows)) * 10, "pid": [100 + r[0] for r in rows],
                       "tid": [100 + r[0] for r in rows], "op": "pread", "fd": 3, "ofd": -1, "path": "/f",
                       "offset": [r[1] * 4096 for r in rows], "size": [r[2] * 4096 for r in rows],
                       "ret": [r[2] * 4096 for r in rows]})
    a = analyze(make_trace(events=ev, files=files_frame("/f", 1 << 20, "ext4", dev=1, ino=1)))
    tasks = a.streams[a.streams["kind"] == "task"].set_index("tid")
    for tid in {100 + r[0] for r in rows}:
        prev, con, seq, total = None, 0, 0, 0
        for task, off, size in rows:
            if 100 + task != tid:
                continue
            off, size = off * 4096, size * 4096
            con += size if prev is None or off == prev else 0
            seq += size if prev is None or off >= prev else 0
            total += size
            prev = off + size
        assert tasks.loc[tid, "consecutive_fraction"] == pytest.approx(con / total)
        assert tasks.loc[tid, "sequential_fraction"] == pytest.approx(seq / total)


def test_sorted_sum_where_matches_the_product():
    """Few groups summed block by block equal reduceat over the product of every row."""
    values = np.arange(1, 21, dtype=np.int64)
    where = values % 3 != 0
    starts = np.array([0, 5, 12])
    with mock.patch.object(grouping, "BLOCK", 4):
        assert grouping.sorted_sum_where(starts, values, where).tolist() == \
            np.add.reduceat(values * where, starts, dtype=np.int64).tolist()
