"""``record --until-idle``: when did the recorded processes last read a file that may hold a checkpoint?

Every read through the page cache leaves page-cache records with the file's dev and inode (a read()'s
page lookups, an mmap's faults, misses, readahead), so the fast ring alone tells, as it is drained,
whether a checkpoint-like file (fs/datafiles.maybe_data) is still being read. The clock starts at the
first such read: the load is done once none came for ``quiet_s``.

A run of page hits is held in a kernel slot until the thread's next run (or its exit): a load that reads
a cached file in under RUN_SPAN_NS and then waits leaves its only record there. So the held runs are
looked at too, every HELD_PEEK_S, each counted at its own time (the record's ts_ns is CLOCK_MONOTONIC,
time.monotonic's clock): a run still held does not keep the load busy."""

from __future__ import annotations

import time

import numpy as np

from readtrace.fs.datafiles import maybe_data
from readtrace.record.records import KIND, event_view

PAGE_KINDS = [KIND[k] for k in ("FAULT", "MAP_PAGES", "GET_PAGES", "MISS", "SYNC_RA", "ASYNC_RA")]
HELD_PEEK_S = 0.25


class IdleWatch:
    """Fed the drained records (``seen``); ``idle()`` once no checkpoint read came for ``quiet_s``.
    ``held()``: the records still held in kernel slots (Session.held_runs)."""

    def __init__(self, decoder, quiet_s: float, held=None):
        self.decoder = decoder
        self.quiet_s = quiet_s
        self.held = held
        self._peeked = 0.0
        self.last: float | None = None  # monotonic s of the latest checkpoint read seen
        self._verdicts: dict[tuple[int, int], bool] = {}
        self._pending: dict[tuple[int, int], float] = {}  # seen, not judged yet -> when

    def _data(self, key: tuple[int, int]) -> bool | None:
        """Is (dev, ino) checkpoint-like? None while its name is not known yet (its open not drained)."""
        if key in self._verdicts:
            return self._verdicts[key]
        info = self.decoder.files.get(key)
        if info is not None:
            path, size = info.path, info.size
        else:
            known = self.decoder.attached.recovered.named() if self.decoder.attached else {}
            if key not in known:
                return None
            path, size = known[key]
        self._verdicts[key] = verdict = maybe_data(path, size)
        return verdict

    def seen(self, events: np.ndarray) -> None:
        pages = event_view(events[np.isin(events["kind"], PAGE_KINDS)], "pages")
        if not len(pages):
            return
        newest = np.argsort(pages["ts_ns"], kind="stable")[::-1]
        files = np.rec.fromarrays([pages["dev"][newest], pages["ino"][newest]], names="dev,ino")
        _, first = np.unique(files, return_index=True)  # each file's newest record
        for i in newest[first].tolist():
            key = (int(pages["dev"][i]), int(pages["ino"][i]))  # judged in idle(): its open may come later
            self._pending[key] = max(self._pending.get(key, 0.0), int(pages["ts_ns"][i]) / 1e9)

    def idle(self) -> bool:
        if self.held is not None and time.monotonic() - self._peeked >= HELD_PEEK_S:
            self._peeked = time.monotonic()
            self.seen(self.held())
        for key, when in list(self._pending.items()):
            verdict = self._data(key)
            if verdict is not None or time.monotonic() - when > self.quiet_s:
                del self._pending[key]
            if verdict:
                self.last = max(self.last or 0.0, when)
        return self.last is not None and time.monotonic() - self.last >= self.quiet_s
