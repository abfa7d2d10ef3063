"""The per-node analyses of a job on an existing Dask cluster (``readtrace report --scheduler tcp://HOST:8786``
or ``DASK_SCHEDULER_ADDRESS``; ``pip install 'readtrace[dask]'``).

Each node trace is one task: a worker reads the trace itself (a local path every worker sees, or an
object-store URL, with the worker's own credentials) and sends back only the node's summary (the
``Node`` the job keeps), never the trace; the merge stays in analyze/job/analysis.py, in this process. A task
that fails (an unreadable trace, a worker that died and the scheduler gave up on: its
``distributed.scheduler.allowed-failures``) is that node's ``NodeFailure``; the others are still reported.
"""

from __future__ import annotations

import os
import uuid

from readtrace.analyze.job.analysis import Node, NodeFailure, analyze_in_worker, node_failure
from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.errors import PrerequisiteError, ReadtraceError
from readtrace.trace.location import is_url, locate

CONNECT_TIMEOUT_S = 30
SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


def scheduler_address(given: str | None) -> str | None:
    """The Dask scheduler to use: the one given, else ``DASK_SCHEDULER_ADDRESS``, else None (local pool)."""
    return given or os.environ.get(SCHEDULER_ENV) or None


def analyze_on_cluster(paths: list, thresholds: Thresholds | None, address: str) -> list[Node | NodeFailure]:
    """Each path's Node (or why not), in order, from the workers of the cluster at ``address``."""
    try:
        from distributed import Client
    except ImportError:
        raise PrerequisiteError("{option} needs Dask's distributed scheduler: pip install "
                                "'readtrace[dask]'", option="scheduler") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise ReadtraceError(f"cannot reach the Dask scheduler at {address}: {' '.join(str(e).split())}") from None
    job = uuid.uuid4().hex[:8]
    with client:
        # Workers have their own working directory: a local path goes as an absolute one.
        where = [p if is_url(p) else os.path.abspath(p) for p in map(str, paths)]
        futures = [client.submit(analyze_in_worker, w, thresholds, key=f"readtrace-node-{job}-{i}", pure=False)
                   for i, w in enumerate(where)]
        out: list[Node | NodeFailure] = []
        for path, future in zip(paths, futures, strict=True):
            try:
                result = future.result()
            except Exception as e:  # noqa: BLE001 - KilledWorker, CancelledError, a worker's own error
                result = node_failure(path, e)
            result.trace = str(locate(path))  # as given, as the local pool names it
            out.append(result)
        return out
