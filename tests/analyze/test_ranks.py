"""Per-rank figures code by code (few ranks and files: no sort of every access) equal the figures of
one sort of every access (many)."""

import numpy as np
import pandas as pd

from readtrace.analyze.job import ranks


def _touches(rng, n=5000):
    """Touches of 3 ranks (pids 10-12, 13 of none) over 3 files: out-of-order and overlapping ranges,
    int32 sizes as a lean load gives them."""
    pid = rng.integers(10, 14, n)
    return ranks.Touches(pid=pid, file=rng.integers(0, 3, n), offset=rng.integers(0, 1 << 20, n),
                         nbytes=rng.integers(0, 1 << 14, n).astype(np.int32), ts=np.sort(rng.integers(0, 10**9, n)),
                         latency=rng.integers(0, 10**6, n))


def test_rank_figures_code_by_code_equal_one_sort(monkeypatch):
    rng = np.random.default_rng(7)
    touches = _touches(rng)
    job = {p: {"rank": p - 10, "local_rank": p - 10, "world_size": 3} for p in (10, 11, 12)}
    data = np.array([0, 2])
    results = []
    for few in (ranks.FEW_GROUPS, 0):
        monkeypatch.setattr(ranks, "FEW_GROUPS", few)
        per = ranks.per_rank(touches, job, 0, data)
        results.append((per, ranks.replicated_bytes(touches, job, per, data),
                        ranks.byte_spans(touches, job, data), ranks.byte_spans(touches, job, data, gap=4096)))
    (per, replicated, spans, merged), (per0, replicated0, spans0, merged0) = results
    pd.testing.assert_frame_equal(per, per0)
    assert replicated == replicated0 > 0 and spans == spans0 and merged == merged0
    assert list(spans) == list(spans0) and sorted(spans) == [0, 1, 2] and all(len(v) > 10 for v in spans.values())
    assert per["bytes_read"].sum() == int(touches.nbytes[(touches.pid < 13) & (touches.file != 1)].sum())
