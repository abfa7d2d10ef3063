"""Work the analysis shares between stream kinds gives the same figures as computing them again."""

import numpy as np
import pandas as pd

from lab.synthetic import load_case, opens, worker_reads
from readtrace.analyze import Thresholds, analyze
from readtrace.analyze.views.grouping import dense_codes
from readtrace.analyze.views.interleave import classify_pieces
from readtrace.analyze.views.streams import BaseOrders
from readtrace.trace import make_trace

PIECE_COLUMNS = ["tid", "bytes", "consecutive_fraction", "sequential_fraction", "in_order_fraction",
                 "first_offset", "last_end"]


def _own_pieces(a):
    """The (open file, task) pieces classified on their own, in the order the analysis lists them."""
    app = a.app
    ofd = dense_codes(app.handle, app.opened, app.file)
    sub = dense_codes(ofd[0], app.tid)
    p = classify_pieces(app, *sub, BaseOrders(app), Thresholds())
    return pd.DataFrame({"tid": p.tid, "bytes": p.bytes, "consecutive_fraction": p.consecutive,
                         "sequential_fraction": p.sequential, "in_order_fraction": p.in_order,
                         "first_offset": p.first_offset, "last_end": p.last_end})


def test_pieces_taken_from_the_task_summary_equal_their_own_classification():
    a = analyze(make_trace(**load_case("shared", workers=4, chunks=16)))  # each piece is a task stream
    got = a.stream_tasks[a.stream_tasks["kind"] == "ofd"][PIECE_COLUMNS].reset_index(drop=True)
    assert len(got) == 4 and got["consecutive_fraction"].eq(1.0).all()
    pd.testing.assert_frame_equal(got, _own_pieces(a), check_dtype=False)


def test_pieces_of_a_task_reading_through_two_open_files_are_classified_on_their_own():
    path = "/mnt/model/model.safetensors"
    shared = worker_reads(2, 8, 4096, True)
    second = worker_reads(1, 8, 4096, False, ts0=5_000_000).assign(pid=101, tid=101, ofd=-0x123400)
    case = load_case("shared")
    events = pd.concat([opens(shared, path), opens(second, path), shared, second], ignore_index=True)
    a = analyze(make_trace(events=events, files=case["files"]))
    got = a.stream_tasks[a.stream_tasks["kind"] == "ofd"][PIECE_COLUMNS].reset_index(drop=True)
    assert len(got) == 3  # tid 101 on both open files, tid 102 on the shared one
    pd.testing.assert_frame_equal(got, _own_pieces(a), check_dtype=False)


def test_every_task_of_a_stream_listed_once():
    for kind in ("sequential", "own", "shared"):
        t = analyze(make_trace(**load_case(kind))).stream_tasks
        assert not t.duplicated(["kind", "code", "tid"]).any(), kind
        assert np.array_equal(np.sort(t["tid"].unique()), np.arange(101, 102 if kind == "sequential" else 105))


def test_forward_only_streams_skip_the_union_and_agree_with_it():
    from readtrace.analyze.views.streams import _unique_bytes

    a = analyze(make_trace(**load_case("shared", workers=4, chunks=16)))
    task, n = dense_codes(a.app.tid, a.app.file)  # every task reads its part forward: no union needed
    got = a.streams[a.streams["kind"] == "task"].sort_values("code")["unique_bytes"].to_numpy()
    assert np.array_equal(got, _unique_bytes(a.app, task, n, BaseOrders(a.app)))
    assert np.array_equal(got, np.full(4, 16 * 256 * 1024))
