"""One probe set, compiled and attached once, records several commands one after another (fix
--compare's runs): each trace holds its own command's tree and the known answers, nothing of the
run before it (a merged read run parked in a kernel slot, a thread id, a lost count)."""

import pytest
from conftest import require
from workloads import ebpf_ready
from workloads.known import SAME_FACTS, check_pread_threads, check_same_fact, record_known

pytestmark = pytest.mark.ebpf


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command
    from readtrace.record.probeset import probe_set

    with probe_set() as probes:
        record = lambda cmd, out: record_command(cmd, out, quiet=True, probes=probes)  # noqa: E731
        first = record_known(tmp_path_factory.mktemp("first"), record)
        between = record(["true"], tmp_path_factory.mktemp("between") / "t.rtrace")
        second = record_known(tmp_path_factory.mktemp("second"), record)
    return first, between, second


@pytest.mark.parametrize("which", [0, 2])
def test_each_recording_of_a_series_holds_the_known_answers(series, which):
    recorded = series[which]
    result, trace, truth, files = recorded
    assert result.exit_code == 0 and result.lost_events == 0 and trace.meta["lost_events"] == 0
    assert trace.meta["probe_set_recording"] == which + 1
    check_pread_threads(trace, truth["pread_threads"], files["pread_threads"], merged_run=True)
    for fact in SAME_FACTS:
        check_same_fact(recorded, fact)


def test_no_recording_holds_anything_of_another(series):
    from readtrace.trace import load_trace

    (_, first, _, first_files), between, (_, second, _, second_files) = series
    quiet = load_trace(between.trace_path)
    pids = [set(t.events.pid) | set(t.pages.pid) for t in (first, quiet, second)]
    assert not pids[0] & pids[1] and not pids[1] & pids[2] and not pids[0] & pids[2]
    assert between.lost_events == 0 and set(quiet.events.pid) == {quiet.meta["pid"]}
    for trace, others in ((first, second_files), (second, first_files), (quiet, {**first_files, **second_files})):
        paths = set(trace.events.path.dropna()) | set(trace.pages.path.dropna())
        assert not paths & {str(p) for p in others.values()}


READER = """import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
open(sys.argv[2], "w").write(str(os.getpid()))
for _ in range(60):
    os.pread(fd, 4096, 0)
    time.sleep(0.05)
"""


def test_a_process_that_outlives_its_recording_is_not_in_the_next(tmp_path):
    """A daemonised reader still running when its command exited is untraced before the next run."""
    import contextlib
    import os
    import signal
    import sys

    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command
    from readtrace.record.probeset import probe_set
    from readtrace.trace import load_trace

    data, script, pid_file = tmp_path / "data.bin", tmp_path / "reader.py", tmp_path / "reader.pid"
    data.write_bytes(os.urandom(1 << 16))
    script.write_text(READER)
    left = f"{sys.executable} {script} {data} {pid_file} & while [ ! -s {pid_file} ]; do sleep 0.05; done"
    try:
        with probe_set() as probes:
            first = record_command(["sh", "-c", left], tmp_path / "first.rtrace", quiet=True, probes=probes)
            second = record_command(["sleep", "1"], tmp_path / "second.rtrace", quiet=True, probes=probes)
        reader = int(pid_file.read_text())
        assert reader in load_trace(first.trace_path).meta["survivors"]
        later = load_trace(second.trace_path)
        assert reader not in set(later.events.pid) and str(data) not in set(later.events.path.dropna())
        assert second.lost_events == 0
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):  # it ends by itself after 3 s
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
