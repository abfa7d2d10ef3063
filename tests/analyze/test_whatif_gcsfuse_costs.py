"""The gcsfuse model's first byte measured from a real recording (issue 21): on the lab mount (gcsfuse's
reader, 20 ms a backend request, the page cache dropped on every open) 4 threads fault one mapping;
only the FUSE requests for which gcsfuse's reader opens a backend request pay the first byte, many
others are read through within a request already open. Taking every request that does not continue
the one before as a first byte measured 0.11 ms for a 64 MiB load (its own trace predicted -50 %)."""

from __future__ import annotations

import os

import pytest
from conftest import lab_mount, require

from lab.loaders import LOADERS
from readtrace.analyze import analyze
from readtrace.analyze.storage.whatif import mount_profile, own_mount_predictions
from readtrace.trace import load_trace

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse, pytest.mark.slow]
recorder = pytest.importorskip("readtrace.record", reason="the recorder is not available")
WITHIN = 0.30  # issue 21's target for every prediction


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from readtrace.pagecache.evict import evict
    from readtrace.workloads import make_checkpoint

    require(os.geteuid() == 0, "recording needs root")
    tmp = tmp_path_factory.mktemp("gcsfuse-costs")
    with lab_mount(tmp, lambda src: make_checkpoint(src, 64)[0], latency_ms=20.0, keep_cache=False) as (mnt, ck):
        evict([str(ck)])
        command = LOADERS["safe_open_threads"].command(mnt, tmp / "digests.jsonl")
        command[2] = str(mnt / ck.name)
        result = recorder.record_command(command, tmp / "load.rtrace", quiet=True)
        return analyze(load_trace(result.trace_path))


def test_the_first_byte_is_measured_on_the_requests_that_opened_a_backend_request(recorded):
    p = mount_profile(recorded)
    assert p.model == "gcsfuse" and 15 <= p.latency_ms <= 40, p


def test_the_load_is_predicted_from_its_own_trace_within_30_percent(recorded):
    [own] = own_mount_predictions(recorded)
    assert abs(own.predicted_s / recorded.summary.wall_s - 1) <= WITHIN, (own, recorded.summary.wall_s)
