"""Vectorized group-by primitives over flat arrays: stable group orders, per-group running values.

A "group" is a stream; codes are dense ints 0..n-1. Sorting by code with a stable sort keeps a base
order (time, offset, latency) inside each group; for < 65,536 groups numpy uses a radix sort.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

_OFFSET_BITS = 44  # offsets below 16 TiB; code << 44 + end stays inside int64 for < 2**19 groups


BLOCK = 1 << 20  # rows per block of a pass done block by block (its temporaries: a block, not every row)
_DENSE_TABLE = 1 << 24  # combine codes through a lookup table up to this many (code, code) pairs


@dataclass(frozen=True)
class Factor:
    """A key numbered 0..n-1 in order of first appearance (``pd.factorize``), kept for reuse."""

    codes: np.ndarray
    n: int


def is_one_value(values: np.ndarray) -> bool:
    """Whether ``values`` are one value broadcast (``one_value``, a lean load's column of one value)."""
    return len(values) > 0 and values.strides == (0,)


def one_value(values: np.ndarray) -> np.ndarray:
    """``values`` as their one value broadcast (read-only, no memory per row) when they all are equal
    (one file, one open file, one read size): every copy and gather of them then costs nothing."""
    if len(values) and not is_one_value(values) and values.min() == values.max():
        return np.broadcast_to(values[:1].copy(), len(values))  # a copy: not a view that keeps them all
    return values


def take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[rows]`` (row indices or a mask); one value broadcast (``one_value``), or one row taken
    for every row, stays broadcast."""
    if is_one_value(values):
        return np.broadcast_to(values[:1], int(rows.sum()) if rows.dtype == bool else len(rows))
    if is_one_value(rows) and rows.dtype != bool:
        return np.broadcast_to(values[rows[:1]], len(rows))
    return values[rows]


def factor(key: np.ndarray | Factor) -> Factor:
    if isinstance(key, Factor):
        return key
    if len(key) and key.min() == key.max():  # one value (e.g. no reused open-file ids): nothing to hash
        return Factor(np.broadcast_to(np.int32(0), len(key)), 1)
    codes, uniques = pd.factorize(key)
    return Factor(codes.astype(np.int32) if len(uniques) < 2**31 else codes, len(uniques))


def dense_codes(*keys: np.ndarray | Factor) -> tuple[np.ndarray, int]:
    """One dense code per distinct tuple of keys (each key an int array of equal length, or its Factor)."""
    first = factor(keys[0])
    codes, n = first.codes, first.n
    for key in keys[1:]:
        sub = factor(key)
        if sub.n == 1:  # one value: the tuples are those of the keys so far (no 10 M-row passes)
            continue
        if n == 1:  # one tuple so far: the tuples are this key's values, numbered as it numbers them
            codes, n = sub.codes, sub.n
            continue
        packed = codes.astype(np.int64) * sub.n + sub.codes
        if n * sub.n <= _DENSE_TABLE:  # no hashing: mark the pairs present, number them
            present = np.bincount(packed, minlength=n * sub.n) > 0
            remap = (np.cumsum(present) - 1).astype(np.int32)  # < 2**24 pairs: int32 codes, no int64 copy
            codes, n = remap[packed], int(present.sum())
        else:
            codes, uniques = pd.factorize(packed)
            n = len(uniques)
    return codes.astype(np.int32 if n < 2**31 else np.int64, copy=False), n


def same_partition(a: np.ndarray, n_a: int, b: np.ndarray, n_b: int) -> bool:
    """Whether two codings group the rows identically (then one summary serves both)."""
    if n_a != n_b:
        return False
    if n_a <= 1:  # every row in the one group
        return True
    image = np.zeros(n_a, dtype=np.int64)
    image[a] = b
    return bool(np.array_equal(image[a], b))


def stable_by_group(codes: np.ndarray, n_groups: int, base: np.ndarray | None) -> np.ndarray:
    """``base`` (row indices; None: every row in order) reordered by group, keeping base order within
    each group."""
    if n_groups <= 1:
        return np.arange(len(codes), dtype=np.int32 if len(codes) < 2**31 else np.int64) if base is None else base
    c = codes if base is None else codes[base]
    if n_groups <= np.iinfo(np.uint16).max:
        c = c.astype(np.uint16)
    order = np.argsort(c, kind="stable")
    if base is not None:
        return base[order]
    return order.astype(np.int32) if len(order) < 2**31 else order  # kept by the caller: half the memory


def group_bounds(sorted_codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each group in an array sorted by code (binary search: no pass over
    the rows)."""
    # keys of the codes' own dtype: int64 keys would make numpy cast every (int32) code first
    starts = np.searchsorted(sorted_codes, np.arange(n_groups, dtype=sorted_codes.dtype)).astype(np.int64)
    counts = np.diff(starts, append=len(sorted_codes))
    return starts, counts


def first_in_group(sorted_codes: np.ndarray) -> np.ndarray:
    first = np.ones(len(sorted_codes), dtype=bool)
    first[1:] = sorted_codes[1:] != sorted_codes[:-1]
    return first


def group_sum(codes: np.ndarray, n_groups: int, weights=None) -> np.ndarray:
    return np.bincount(codes, weights=weights, minlength=n_groups)


FEW_GROUPS = 64  # up to this many groups, passes go group by group (no temporaries of every row)


def sorted_sum(starts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Exact int64 sums per group of an array sorted by group; ``starts`` of the (non-empty) groups.
    Values narrower than int64 (flags) in few groups: summed group by group (reduceat would first
    cast every row to int64: a second array of them)."""
    if len(values) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    if values.dtype == np.int64 or len(starts) > FEW_GROUPS:
        return np.add.reduceat(values, starts, dtype=np.int64)
    ends = [*starts[1:].tolist(), len(values)]
    return np.array([np.add.reduce(values[s:e], dtype=np.int64) if e > s else values[s]  # reduceat's rule
                     for s, e in zip(starts.tolist(), ends, strict=True)], dtype=np.int64)


def sorted_sum_where(starts: np.ndarray, values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``sorted_sum`` of ``values`` where ``where`` (0 elsewhere). Few groups: block by block, no
    product of every row."""
    if len(values) == 0 or len(starts) > FEW_GROUPS:
        return sorted_sum(starts, values * where)
    ends = [*starts[1:].tolist(), len(values)]
    out = []
    for s, e in zip(starts.tolist(), ends, strict=True):
        out.append(sum(int(np.add.reduce(values[i:min(i + BLOCK, e)], where=where[i:min(i + BLOCK, e)],
                                          dtype=np.int64)) for i in range(s, e, BLOCK))
                   if e > s else int(values[s]) * int(where[s]))  # reduceat's rule
    return np.array(out, dtype=np.int64)


def running_max_in_group(sorted_codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each group (codes ascending)."""
    if len(values) == 0 or sorted_codes[0] == sorted_codes[-1]:  # one group: a plain running max
        return np.maximum.accumulate(values)
    lo = values.min()
    span = int(values.max()) - int(lo) + 1  # Python ints: the difference of int64 extremes overflows
    if span < (1 << _OFFSET_BITS) and int(sorted_codes[-1]) < (1 << (62 - _OFFSET_BITS)):
        packed = sorted_codes.astype(np.int64)  # in place from here on: one array of every row
        packed <<= _OFFSET_BITS
        packed += values
        packed -= lo
        np.maximum.accumulate(packed, out=packed)
        for i in range(0, len(packed), BLOCK):  # the codes back out, block by block
            packed[i:i + BLOCK] -= sorted_codes[i:i + BLOCK].astype(np.int64) << _OFFSET_BITS
        packed += lo
        return packed
    sorted_codes = sorted_codes.astype(np.int64, copy=False)
    # >= 2**18 groups or a span >= 16 TiB do not pack into int64; pandas hands back a read-only view
    return pd.Series(values).groupby(sorted_codes).cummax().to_numpy(copy=True)


def union_length(sorted_codes: np.ndarray, n_groups: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Bytes covered by the union of [start, end) per group; rows sorted by (code, start)."""
    if len(start) == 0:
        return np.zeros(n_groups)
    # in place where possible: this runs on every access of the trace
    reach = running_max_in_group(sorted_codes, end)
    # each interval starts at the furthest end before it or later: block by block from the end (the
    # shift of a block reads the one below it, still unchanged): no shifted copy of every row
    for hi in range(len(reach), 1, -BLOCK):
        lo = max(1, hi - BLOCK)
        np.maximum(reach[lo - 1:hi - 1], start[lo:hi], out=reach[lo:hi])
    reach[0] = start[0]
    if not is_one_value(sorted_codes):  # one group broadcast: no group starts but the first
        np.copyto(reach, start, where=first_in_group(sorted_codes))  # a group's first interval continues nothing
    np.subtract(end, reach, out=reach)
    np.clip(reach, 0, None, out=reach)
    if is_one_value(sorted_codes):  # exact sum of integers: bincount's float sum of them, less the codes
        return np.array([float(reach.sum())] + [0.0] * (n_groups - 1))
    return group_sum(sorted_codes, n_groups, reach)


def quantiles(sorted_codes: np.ndarray, n_groups: int, values: np.ndarray, q: float) -> np.ndarray:
    """Per-group quantile (linear interpolation, numpy's default); values sorted within groups."""
    starts, counts = group_bounds(sorted_codes, n_groups)
    out = np.full(n_groups, np.nan)
    has = counts > 0
    pos = q * (counts[has] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.ceil(pos).astype(np.int64)
    vlo = values[starts[has] + lo].astype(float)
    vhi = values[starts[has] + hi].astype(float)
    out[has] = vlo + (vhi - vlo) * (pos - lo)
    return out


def selected_quantiles(values: np.ndarray, qs: tuple[float, ...], keep=None) -> list[float]:
    """``quantiles`` of one group by selection (np.partition, no sort): the same order statistics and
    the same interpolation. ``keep``: a predicate on the values (those it rejects do not count)."""
    values = values.copy() if keep is None else values[keep(values)]  # a copy: partitioned in place
    if len(values) == 0:
        return [np.nan] * len(qs)
    pos = np.asarray(qs, dtype=float) * (len(values) - 1)
    lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
    values.partition(np.unique(np.r_[lo, hi]))
    vlo, vhi = values[lo].astype(float), values[hi].astype(float)
    return (vlo + (vhi - vlo) * (pos - lo)).tolist()


def top_values(codes: np.ndarray, n_groups: int, values: np.ndarray, k: int = 4,
               value_codes: np.ndarray | None = None) -> list[list[list[int]]]:
    """The ``k`` most frequent values per group as [[value, count], ...] (ties: smaller value first).
    ``value_codes``: ``pd.factorize(all values)`` codes, ``values`` then being its uniques."""
    out: list[list[list[int]]] = [[] for _ in range(n_groups)]
    if len(codes) == 0:
        return out
    if value_codes is None:
        vcodes, vuniques = pd.factorize(values)
    else:
        vcodes, vuniques = value_codes, values
    packed = vcodes if n_groups == 1 else codes.astype(np.int64) * len(vuniques) + vcodes
    # a count per possible pair only where the pairs are not far more than the rows: 6,433 reads of
    # 4,194 library files with 3,895 sizes were 16 M counters to fill and scan (0.18 s), sorting 0.001 s
    if n_groups * len(vuniques) <= min(50_000_000, max(8 * len(packed), 1 << 20)):
        counts = np.bincount(packed, minlength=n_groups * len(vuniques))
        pairs = np.flatnonzero(counts)
        counts = counts[pairs]
    else:
        pairs, counts = np.unique(packed, return_counts=True)
    table = pd.DataFrame({"g": pairs // len(vuniques), "v": np.asarray(vuniques)[pairs % len(vuniques)],
                          "n": counts})
    table = table.sort_values(["g", "n", "v"], ascending=[True, False, True]).groupby("g").head(k)
    for g, v, n in zip(table["g"].to_numpy(), table["v"].to_numpy(), table["n"].to_numpy(), strict=True):
        out[g].append([int(v), int(n)])
    return out


def top_values_sorted(starts: np.ndarray, counts: np.ndarray, values: np.ndarray, k: int = 4
                      ) -> list[list[list[int]]]:
    """``top_values`` of rows sorted by group (``group_bounds``' starts and counts), one group's values
    counted at a time: no per-row codes of every row (for few groups)."""
    out = []
    for s, c in zip(starts.tolist(), counts.tolist(), strict=True):
        # block by block: a hash table sized for a block, not for every row of a 10 M-row stream
        parts = [pd.Series(values[i:min(i + BLOCK, s + c)]).value_counts(sort=False)
                 for i in range(s, s + c, BLOCK)]
        if not parts:
            out.append([])
            continue
        counted = parts[0] if len(parts) == 1 else pd.concat(parts).groupby(level=0).sum()
        table = pd.DataFrame({"v": counted.index.to_numpy(), "n": counted.to_numpy()})
        table = table.sort_values(["n", "v"], ascending=[False, True]).head(k)
        out.append([[int(v), int(n)] for v, n in zip(table["v"].tolist(), table["n"].tolist(), strict=True)])
    return out


def max_overlap(groups: np.ndarray, n_groups: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per group, the most closed intervals [start, end] open at one instant (starts before ends on
    ties: an access of zero duration still counts)."""
    out = np.zeros(n_groups, dtype=np.int64)
    if len(groups) == 0:
        return out
    g = np.concatenate([groups, groups])
    t = np.concatenate([starts, ends])
    d = np.concatenate([np.ones(len(groups), np.int64), -np.ones(len(groups), np.int64)])
    order = np.lexsort((-d, t, g))
    # Each group's +1/-1 sum to zero, so the running level restarts at 0 at every group.
    np.maximum.at(out, g[order], np.cumsum(d[order]))
    return out
