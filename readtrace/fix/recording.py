"""fix --compare's recorder: every run of one comparison recorded under one probe set, each run's
trace analysed only when something reads its summary.

The probes are compiled and attached at the first run and kept until ``close`` (``compare`` closes
the recorder it was given when it ends, also on an error or Ctrl-C): later runs pay neither the
compile (1.5-9 s on 2 vCPUs) nor the detach. Each run still gets its own trace, cut to its own
process tree (record/probeset.py: the kernel maps forget one run before the next starts). A run's
summary (the analyzer's, ``tracefacts.trace_summary``) is computed on first read: the table and the
verdict read the baseline and fixed runs', never a trial's, so a trial's trace is written but not
analysed (``readtrace report`` analyses it on demand). ``older=True`` is the recorder from before
issue 23 (probes compiled and detached for every run, every trace analysed at once), kept to measure
the difference side by side (benchmarks/time_to_answer.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path


class TraceSummary(Mapping):
    """A run's trace summary, analysed when first read (``tracefacts.trace_summary``; empty without the
    analyzer)."""

    def __init__(self, trace_path: str | Path):
        self.trace_path = str(trace_path)
        self._data: dict | None = None

    def _loaded(self) -> dict:
        if self._data is None:
            from readtrace.fix.tracefacts import trace_summary

            self._data = trace_summary(self.trace_path) or {}
        return self._data

    def __getitem__(self, key):
        return self._loaded()[key]

    def __iter__(self) -> Iterator:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    @property
    def analysed(self) -> bool:
        return self._data is not None


@contextmanager
def attaching(recorder) -> Iterator[None]:
    """Compile and attach ``recorder``'s probes (``RunRecorder.attach``) in a background thread while the
    body runs (the recorded trace's checks and analysis), attached when it ends: the first recorded run
    after it pays no compile (0.7-1.0 s of clang here), and the floor, measured after it, runs beside the
    same probes as every recorded run of the comparison (as it does where the first baseline run is
    recorded here)."""
    with _meanwhile(getattr(recorder, "attach", None)):
        yield


@contextmanager
def detaching(recorder) -> Iterator[None]:
    """Close ``recorder`` (``RunRecorder.close``: detach its probes) in a background thread while the body
    runs: each tracepoint's detach waits for an RCU grace period (0.3-0.4 s in all on this VM), the
    comparison's last analysis is Python."""
    with _meanwhile(getattr(recorder, "close", None)):
        yield


@contextmanager
def _meanwhile(call) -> Iterator[None]:
    """``call()`` in a background thread while the body runs, waited for (its error raised) when it ends;
    nothing where ``call`` is not callable (a recorder without it, or none)."""
    if not callable(call):
        yield
        return
    with ThreadPoolExecutor(1, thread_name_prefix="readtrace-recorder") as pool:
        done = pool.submit(call)
        try:
            yield
        finally:
            done.result()


def analyse(runs) -> None:
    """Analyse the traces of ``runs`` now (compare's baseline and fixed runs: before their work
    directory goes, so the table can still read their summaries)."""
    for run in runs:
        if isinstance(run.summary, TraceSummary):
            run.summary._loaded()


class RunRecorder:
    """A ``compare.Recorder``: ``(command, env, cwd, trace) -> (exit code, wall s, trace summary)``."""

    def __init__(self, older: bool = False):
        self.older = older
        self._stack: ExitStack | None = None
        self._probes = None

    def __call__(self, command, env, cwd, trace: Path):
        from readtrace.record import record_command

        result = record_command(command, str(trace), force=True, env=env, cwd=cwd, quiet=True,
                                probes=self._probe_set())
        result.raise_if_interrupted()
        summary = TraceSummary(result.trace_path)
        if self.older:
            summary._loaded()
        return result.exit_code, result.wall_s, summary

    def attach(self) -> None:
        """Compile and attach the probes now (else at the first run)."""
        self._probe_set()

    def _probe_set(self):
        if self.older:
            return None
        if self._probes is None:
            from readtrace.record.probeset import probe_set

            stack = ExitStack()
            self._probes = stack.enter_context(probe_set())
            self._stack = stack
        return self._probes

    def close(self) -> None:
        """Detach the probes (a later call attaches them again)."""
        stack, self._stack, self._probes = self._stack, None, None
        if stack is not None:
            stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
