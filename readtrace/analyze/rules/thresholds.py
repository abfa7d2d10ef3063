"""Every number a finding or a classification rule compares against, in one overridable place."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from readtrace.errors import UsageError
from readtrace.validate import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, Range

MiB = 1 << 20

# The valid range of every threshold: byte sizes that divide or bound a request are > 0, windows and
# minimums >= 0, fractions and scores finite and >= 0 (above 1 turns a rule off).
_POSITIVE_BYTES = ("gcsfuse_seek_window", "gcsfuse_max_random_read", "gcsfuse_min_random_read",
                   "gcsfuse_sequential_read", "small_request_size", "fuse_readahead_small",
                   "fuse_readahead_recommended_kb")
_MINIMUMS = ("reorder_window", "gcsfuse_min_seeks_for_random", "interleave_max_gap", "interleave_min_bytes",
             "evidence_lines", "random_handle_min_requests", "small_request_min_count",
             "small_request_min_file_bytes", "mmap_fault_min_count", "cold_cache_min_bytes", "reread_min_bytes",
             "fuse_readahead_min_requests")
_FRACTIONS = ("interleave_task_in_order_min", "interleave_merged_in_order_max", "interleave_min_score",
              "random_handle_fraction", "small_request_fraction", "cold_cache_miss_fraction", "reread_min_fraction",
              "high_min_wall_fraction", "warn_min_wall_fraction", "prediction_caveat_fraction")
_SECONDS = ("high_min_s", "warn_min_s")
RANGES: dict[str, Range] = {**dict.fromkeys(_POSITIVE_BYTES, POSITIVE_INT), **dict.fromkeys(_MINIMUMS, NON_NEGATIVE_INT),
                            **dict.fromkeys(_FRACTIONS, NON_NEGATIVE), **dict.fromkeys(_SECONDS, NON_NEGATIVE),
                            "interleave_min_tasks": Range(int, 2)}


@dataclass(frozen=True)
class Thresholds:
    """Defaults follow docs/report.md and Drishti; override with ``--threshold NAME=VALUE``."""

    # gcsfuse replay (internal/gcsx/random_reader.go)
    gcsfuse_seek_window: int = 8 * MiB  # a read > this past the expected offset is a seek
    # requests that overtake each other by at most this much (the kernel's readahead in flight,
    # measured 100-250 KiB on the lab mount) are a reordering, not a jump back
    reorder_window: int = 1 * MiB
    gcsfuse_min_seeks_for_random: int = 2
    gcsfuse_max_random_read: int = 8 * MiB  # random requests fetch 1..8 MiB
    gcsfuse_min_random_read: int = 1 * MiB
    gcsfuse_sequential_read: int = 200 * MiB  # --sequential-read-size-mb
    # shared-fd interleave: tasks mostly in order on their own (no seeks), the merged stream mostly not
    interleave_max_gap: int = 1 * MiB  # "in order": forward from the previous end by at most this
    interleave_min_tasks: int = 2
    interleave_task_in_order_min: float = 0.8  # byte-weighted over the tasks
    interleave_merged_in_order_max: float = 0.5
    interleave_min_score: float = 0.3
    interleave_min_bytes: int = 1 * MiB  # bytes read, or the file extent they span
    evidence_lines: int = 8
    # random reads on a per-handle file system
    random_handle_fraction: float = 0.3  # byte-weighted seek fraction on the handle
    random_handle_min_requests: int = 16  # predicted backend requests before it matters
    # Drishti: small requests < 1 MiB making up > 10 % of the requests
    small_request_size: int = 1 * MiB
    small_request_fraction: float = 0.1
    small_request_min_count: int = 16
    small_request_min_file_bytes: int = 16 * MiB  # smaller files cannot be read in large requests anyway
    # mmap page faults
    mmap_fault_min_count: int = 256
    # page cache
    cold_cache_miss_fraction: float = 0.5  # share of the bytes accessed that missed the cache
    cold_cache_min_bytes: int = 1 * MiB
    reread_min_bytes: int = 1 * MiB  # bytes fetched into the page cache more than once ...
    reread_min_fraction: float = 0.05  # ... and this share of the file's distinct fetched bytes
    # FUSE readahead: requests this small mean the kernel default (128 KiB) is in effect
    fuse_readahead_small: int = 128 * 1024
    fuse_readahead_min_requests: int = 16
    fuse_readahead_recommended_kb: int = 1024
    # Severity follows the seconds a finding costs (analyze/rules/cost.py; printed in docs/report.md): HIGH
    # only when its cost (the wall seconds the load waited on its file, less what one sequential read of
    # the same bytes costs on that mount) is >= both of these; INFO when it is under either of the warn
    # ones (the load is at its floor, or the cost is tiny), whatever the counters say; WARN between.
    high_min_s: float = 1.0
    high_min_wall_fraction: float = 0.2
    warn_min_s: float = 0.25
    warn_min_wall_fraction: float = 0.05
    # the what-if model's prediction of the recording itself, off the measured wall by more than this:
    # the HTML report's chart says its predictions are rough
    prediction_caveat_fraction: float = 0.25

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not RANGES[f.name].holds(value) \
                    or value != value:
                raise UsageError(f"threshold {f.name}={value!r}: must be {RANGES[f.name].describe()}")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def override(self, assignments: list[str] | None) -> Thresholds:
        """A copy with ``NAME=VALUE`` assignments applied; a bad one is a usage error (one line)."""
        types = {f.name: f.type for f in fields(self)}
        changes: dict[str, float | int] = {}
        for item in assignments or []:
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep or name not in types:
                raise UsageError(
                    f"{{option}} {item!r}: expected NAME=VALUE with NAME one of {', '.join(types)}", option="threshold")
            try:
                changes[name] = RANGES[name].parse(text)
            except ValueError as e:
                raise UsageError(f"{{option}} {item!r}: {e}", option="threshold") from None
        return replace(self, **changes)
