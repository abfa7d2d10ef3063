"""The typed summary's JSON form (``Summary.data()``: report --json's "summary", fix's run records)."""

import json

from lab.synthetic import load_case
from readtrace.analyze import analyze
from readtrace.report.jsonreport import report_json
from readtrace.trace import make_trace

# The keys in the order report --json printed them when the summary was a dict (issue 27): a change of
# name or order changes every report a user's CI parses.
KEYS = (
    "complete", "incomplete_reasons", "bytes_read", "read_bytes", "mmap_bytes", "reads", "page_faults", "files",
    "readtrace_files_dropped", "tasks", "processes", "cache_miss_bytes", "cache_refetched_bytes",
    "cache_miss_fraction", "fuse_requests", "fuse_read_requests", "fuse_read_bytes", "handle_consecutive_fraction",
    "handle_sequential_fraction", "gcsfuse_predicted_requests", "lost_events", "wall_s", "command", "exit_code",
    "backend", "missing_views", "not_seen", "container", "reads_from",
    # the time split
    "time_split_source", "io_wait_s", "io_wait_fraction", "read_wait_s", "fault_wait_s", "fuse_wait_s",
    "data_wait_s", "io_wait_task_s", "cpu_s", "runq_s", "wait_file", "wait_file_s", "wait_file_fuse",
    "wait_file_faults", "wait_tasks", "besides_hidden_s",
    "measured_mount", "replicated_rank_bytes",
)
PREDICTION_KEYS = ("mount_profile", "mount_latency_ms", "mount_request_ms", "predicted_fixed_s", "fixed_strategy",
                   "mount_latency_recorded")


def test_the_summary_keeps_its_json_keys_and_order():
    a = analyze(make_trace(**load_case("shared")))  # on a FUSE mount: the model predicts the fix there
    s = a.summary
    assert list(s.data()) == [*KEYS, *PREDICTION_KEYS]
    assert s.data()["io_wait_s"] == s.time.io_wait_s and s.data()["mount_profile"] == s.prediction.mount_profile
    printed = json.loads(json.dumps(report_json(a)))["summary"]
    assert list(printed) == [*KEYS, *PREDICTION_KEYS] and printed["bytes_read"] == s.bytes_read


def test_the_prediction_keys_only_with_a_prediction():
    empty = analyze(make_trace())  # no wall: no prediction
    assert empty.summary.prediction is None and list(empty.summary.data()) == list(KEYS)
