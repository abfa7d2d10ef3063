"""What took page cache away while a recording ran: memory pressure, drop_caches, or proactive reclaim.

A page fetched twice was evicted in between, and the remedy depends on who evicted it. Memory pressure
(kswapd, direct reclaim) is what more memory or a larger cgroup limit relieves. Proactive reclaim is
not pressure: DAMON ``pageout`` schemes (its sysfs admin interface, or DAMON_RECLAIM) page out cache
that looked idle for seconds with GBs free (this lab VM runs one: paddr regions with <= 1 access in
60 s, 128 MiB/s), and more memory changes nothing. /proc/vmstat read before and after says whether
pressure reclaim or drop_caches ran; DAMON's own statistics, where root can read them, say how much its
pageout schemes applied. DAMON pageout goes through reclaim_pages(), which counts in no pgsteal
counter (Linux 6.18: 1.88 GB applied by the scheme, every pgsteal_* still 0), so only DAMON says it.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from readtrace.pagecache.pin import PAGE, mem_available

PRESSURE = ("pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged")
PROACTIVE = "pgsteal_proactive"  # writes to a cgroup's memory.reclaim (Linux 6.14+)
DROP_CACHES = "drop_pagecache"
KDAMONDS = Path("/sys/kernel/mm/damon/admin/kdamonds")
DAMON_RECLAIM = Path("/sys/module/damon_reclaim/parameters")
BUSY_TRIES, BUSY_WAIT_S = 15, 0.05
CONFIGURED_WAIT_S = 0.1  # at a recording's end, for the thread's first read of what runs
REFRESH_S = 0.2  # between DAMON refreshes (each also waits for the kdamond's next sample)

# causes, in the order a report weighs them (meta["reclaim"]["cause"])
PRESSURE_CAUSE, DROPPED, PROACTIVE_CAUSE, NONE_SEEN = "memory pressure", "drop_caches", "proactive reclaim", "none seen"
CAUSES = (PRESSURE_CAUSE, DROPPED, PROACTIVE_CAUSE, NONE_SEEN)


@dataclass(frozen=True)
class Pageout:
    """One DAMON scheme that pages out memory it saw idle, and its bytes applied so far (None: unread)."""

    where: str  # "kdamond 0 scheme 0", "DAMON_RECLAIM"
    max_accesses: int | None  # of the samples of one aggregation interval that saw an access
    samples: int | None  # samples an aggregation interval
    min_idle_s: float | None
    quota_bytes_per_s: float | None
    applied_bytes: int | None

    def describe(self) -> str:
        idle = f", idle >= {self.min_idle_s:g} s" if self.min_idle_s is not None else ""
        seen = (f" seen accessed in at most {self.max_accesses} of {self.samples} samples an interval"
                if self.max_accesses is not None and self.samples else "")
        quota = f", up to {self.quota_bytes_per_s / (1 << 20):.0f} MiB/s" if self.quota_bytes_per_s else ""
        return f"DAMON pageout ({self.where}): memory{seen}{idle}{quota}"


@dataclass(frozen=True)
class Counters:
    """/proc/vmstat's reclaim counters and MemAvailable at one moment (cheap: read at a run's edges)."""

    vmstat: dict[str, int]
    mem_available: int | None

    @classmethod
    def now(cls) -> Counters:
        return cls(_vmstat(), mem_available())


def pageouts(refresh: bool = True) -> tuple[Pageout, ...]:
    """The proactive pageout configured here and running (root only), with its statistics refreshed (a
    kdamond's refresh waits for its next sample, up to 0.5 s here) or, ``refresh=False``, unread."""
    return tuple(_kdamond_pageouts(refresh)) + tuple(_damon_reclaim())


_last_configured: tuple[Pageout, ...] | None = None  # what this process last read runs here


class Watch:
    """What reclaimed page cache over a recording: the counters at its start and end, and DAMON's
    statistics refreshed again and again in a thread of its own. Nothing of DAMON is read on the
    caller's path (a refresh in flight, ours or another recorder's, makes its sysfs answer EBUSY for up
    to a kdamond sample); the last refresh done before the end counts, never one after it."""

    def __init__(self) -> None:
        self._before = Counters.now()
        self._configured: tuple[Pageout, ...] | None = None  # None: not read (yet)
        self._readings: list[tuple[Pageout, ...]] = []
        self._read = threading.Event()
        self._done = threading.Event()
        if KDAMONDS.is_dir() or DAMON_RECLAIM.is_dir():
            threading.Thread(target=self._watch, name="readtrace-reclaim", daemon=True).start()
        else:
            self._configured = ()
            self._read.set()

    def _watch(self) -> None:
        global _last_configured
        configured = pageouts(refresh=False)
        if configured or _last_configured is None:  # empty may be a busy sysfs: an earlier reading stands
            _last_configured = configured
        self._configured = _last_configured
        self._read.set()
        while self._configured and not self._done.is_set():
            if reading := pageouts():
                self._readings.append(reading)
            self._done.wait(REFRESH_S)

    def stop(self) -> dict:
        """meta["reclaim"] of the recording."""
        self._done.set()
        if not self._read.wait(CONFIGURED_WAIT_S if _last_configured is None else 0):
            self._configured = _last_configured  # still busy: what an earlier recording here read
        if self._configured is None:
            return window(self._before, Counters.now(), None)
        readings = list(self._readings) or [self._configured]  # shorter than a refresh: what runs, unread
        return window(self._before, Counters.now(), readings)


def window(before: Counters, after: Counters, readings: Sequence[tuple[Pageout, ...]] | None = ()) -> dict:
    """What reclaimed page cache between two moments (``readings``: DAMON's between them, in order, what
    was paged out counted from the first to the last, none from one alone; None where what runs could not
    be read) and the cause a report names: the first of memory pressure, drop_caches, proactive reclaim seen."""
    def delta(key: str) -> int | None:
        if key not in before.vmstat or key not in after.vmstat:
            return None
        return after.vmstat[key] - before.vmstat[key]

    pressure = [d for d in map(delta, PRESSURE) if d is not None]
    earlier = {p.where: p.applied_bytes for p in readings[0]} if readings and len(readings) > 1 else {}
    pageouts = None if readings is None else [
        {"where": p.where, "described": p.describe(),
         "applied_bytes": (None if p.applied_bytes is None or earlier.get(p.where) is None
                           else p.applied_bytes - earlier[p.where])} for p in (readings[-1] if readings else ())]
    out = {"pressure_pages": sum(pressure) if pressure else None, "proactive_pages": delta(PROACTIVE),
           "drop_caches": delta(DROP_CACHES), "pageouts": pageouts,
           "mem_available_bytes": min((m for m in (before.mem_available, after.mem_available) if m is not None),
                                      default=None)}
    out["cause"] = _cause(out)
    return out


def _cause(w: dict) -> str:
    if w["pressure_pages"]:
        return PRESSURE_CAUSE
    if w["drop_caches"]:
        return DROPPED
    pageouts = w["pageouts"] or []
    if w["proactive_pages"] or any(p["applied_bytes"] for p in pageouts):
        return PROACTIVE_CAUSE
    if pageouts and all(p["applied_bytes"] is None for p in pageouts):
        return PROACTIVE_CAUSE  # configured and running, its statistics unread: the only candidate seen
    return NONE_SEEN


def explain(w: object) -> tuple[str, str]:
    """(the cause, the sentence a report says of who evicted pages during the run) from meta["reclaim"];
    a trace without it, or with one this code did not write: ("", that it is not known)."""
    w = _checked(w)
    if w is None:
        return "", "whether memory pressure evicted them is not known (not in this trace)"
    free = (f", {w['mem_available_bytes'] / (1 << 30):.1f} GiB available"
            if w["mem_available_bytes"] is not None else "")
    pressure, cause = w["pressure_pages"], w["cause"]
    if cause == PRESSURE_CAUSE:
        return cause, f"memory pressure reclaimed {_mib(pressure * PAGE)} of page cache during the run (kswapd, direct){free}"
    if cause == DROPPED:
        return cause, "something wrote to /proc/sys/vm/drop_caches during the run"
    calm = "no memory-pressure reclaim ran during the run" if pressure == 0 else "memory-pressure reclaim was not read"
    if cause == PROACTIVE_CAUSE:
        done = [p for p in w["pageouts"] if p["applied_bytes"]]
        what = [f"{p['described']}: {_mib(p['applied_bytes'])} paged out during the run" if p in done
                else p["described"] for p in (done or w["pageouts"])]
        if w["proactive_pages"]:
            what.append(f"memory.reclaim: {_mib(w['proactive_pages'] * PAGE)} during the run")
        return cause, f"{calm}{free}; proactive reclaim evicts idle page cache here ({'; '.join(what)})"
    if w["pageouts"]:
        idle = "; ".join(p["described"] for p in w["pageouts"])
        return cause, f"{calm}{free}, and the proactive reclaim here paged out nothing during it ({idle})"
    if w["pageouts"] is None:
        return cause, f"{calm}{free}; whether DAMON's proactive reclaim ran could not be read (its sysfs was busy)"
    return cause, f"{calm}{free}, and no proactive reclaim was seen (DAMON's is read as root only)"


def _checked(w: object) -> dict | None:
    """meta["reclaim"] as ``window`` writes it, else None (a trace is input: nothing in it is trusted)."""
    def count(v: object) -> bool:
        return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)

    if not isinstance(w, dict) or w.get("cause") not in CAUSES or not isinstance(w.get("pageouts"), list | None):
        return None
    if not all(count(w.get(k)) for k in ("pressure_pages", "proactive_pages", "drop_caches", "mem_available_bytes")):
        return None
    if not all(isinstance(p, dict) and isinstance(p.get("described"), str) and count(p.get("applied_bytes"))
               for p in w["pageouts"] or []):
        return None
    return w


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def _vmstat() -> dict[str, int]:
    wanted = {*PRESSURE, PROACTIVE, DROP_CACHES}
    out = {}
    with contextlib.suppress(OSError), open("/proc/vmstat", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key in wanted:
                out[key] = int(value)
    return out


def _read(path: Path) -> str | None:
    """The file's text; None where it cannot be read (not root). DAMON's sysfs answers EBUSY while any
    refresh waits on a kdamond (ours, or another recorder's, up to a sample: 0.5 s here): tried again."""
    for _ in range(BUSY_TRIES):
        try:
            return path.read_text(encoding="ascii").strip()
        except OSError as e:
            if e.errno != errno.EBUSY:
                return None
            time.sleep(BUSY_WAIT_S)
        except UnicodeDecodeError:
            return None
    return None


def _number(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _kdamond_pageouts(refresh: bool):
    """The running kdamonds' pageout schemes, their statistics refreshed first (root only; a write of
    ``update_schemes_stats`` to the kdamond's state only refreshes what its stats files say)."""
    if not KDAMONDS.is_dir():
        return
    for kdamond in sorted(KDAMONDS.glob("[0-9]*")):
        if _read(kdamond / "state") != "on":
            continue
        try:
            if refresh:
                (kdamond / "state").write_text("update_schemes_stats", encoding="ascii")
            fresh = refresh
        except OSError:
            fresh = False  # its statistics are as old as whoever refreshed them last: not this run's
        for context in sorted((kdamond / "contexts").glob("[0-9]*")):
            attrs = context / "monitoring_attrs" / "intervals"
            aggr_us, sample_us = _number(attrs / "aggr_us"), _number(attrs / "sample_us")
            for scheme in sorted((context / "schemes").glob("[0-9]*")):
                if _read(scheme / "action") != "pageout":
                    continue
                age = _number(scheme / "access_pattern" / "age" / "min")
                quota, reset_ms = _number(scheme / "quotas" / "bytes"), _number(scheme / "quotas" / "reset_interval_ms")
                yield Pageout(f"kdamond {kdamond.name} scheme {scheme.name}",
                              _number(scheme / "access_pattern" / "nr_accesses" / "max"),
                              aggr_us // sample_us if aggr_us and sample_us else None,
                              age * aggr_us / 1e6 if age is not None and aggr_us else None,
                              quota * 1000 / reset_ms if quota and reset_ms else None,
                              _number(scheme / "stats" / "sz_applied") if fresh else None)


def _damon_reclaim():
    """DAMON_RECLAIM, the kernel's built-in proactive reclaim, where it is enabled."""
    if _read(DAMON_RECLAIM / "enabled") != "Y":
        return
    min_age_us = _number(DAMON_RECLAIM / "min_age")
    quota, reset_ms = _number(DAMON_RECLAIM / "quota_sz"), _number(DAMON_RECLAIM / "quota_reset_interval_ms")
    yield Pageout("DAMON_RECLAIM", None, None, min_age_us / 1e6 if min_age_us else None,
                  quota * 1000 / reset_ms if quota and reset_ms else None,
                  _number(DAMON_RECLAIM / "bytes_reclaimed_regions"))
