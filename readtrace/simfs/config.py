"""The lab mount's settings: one dataclass, passed to the daemon process as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from readtrace.errors import UsageError
from readtrace.simfs.link import check_name
from readtrace.simfs.model import PROFILES
from readtrace.validate import NON_NEGATIVE, POSITIVE, POSITIVE_INT, Range

# The valid range of each numeric setting (the CLI's argparse types use the same ones).
RANGES = {"latency_ms": NON_NEGATIVE, "bandwidth_mbps": POSITIVE, "max_read_kib": Range(int, 4),
          "readahead_kib": Range(int, 0), "max_backend": POSITIVE_INT}


@dataclass(frozen=True)
class SimConfig:
    """Everything the daemon needs. Sizes in KiB, times in ms, bandwidth in MB/s (10**6 bytes/s)."""

    src: str
    mountpoint: str
    log: str
    profile: str = "gcsfuse"
    latency_ms: float = 20.0  # first-byte latency of a backend request (ignored by ``local``)
    bandwidth_mbps: float | None = None  # aggregate link bandwidth; None: unlimited
    max_read_kib: int = 1024  # kernel max_read: the largest FUSE READ request
    readahead_kib: int | None = None  # /sys/class/bdi/<dev>/read_ahead_kb (root only); None: kernel default (128)
    max_backend: int = 64  # concurrent backend requests (a semaphore)
    keep_cache: bool = False  # keep the kernel page cache across opens (FOPEN_KEEP_CACHE)
    shared_link: str | None = None  # share bandwidth_mbps with every lab mount of this name (simfs/link.py)

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise UsageError(f"unknown simfs profile {self.profile!r} (choose from {', '.join(PROFILES)})")
        for name, valid in RANGES.items():
            value = getattr(self, name)
            if value is not None:
                try:
                    valid.parse(value)
                except ValueError:
                    raise UsageError(f"simfs: {name} must be {valid.describe()} (got {value!r})") from None
        if self.shared_link is not None:
            if self.bandwidth_mbps is None or not PROFILES[self.profile].has_latency:
                raise UsageError("simfs: a shared link needs a bandwidth ({option}) and a profile "
                                 "with a backend (gcsfuse or nfs)", option="bandwidth_mbps")
            check_name(self.shared_link)

    @property
    def first_byte_s(self) -> float:
        return self.latency_ms / 1000.0 if PROFILES[self.profile].has_latency else 0.0

    @property
    def bytes_per_s(self) -> float | None:
        if not PROFILES[self.profile].has_latency or self.bandwidth_mbps is None:
            return None
        return self.bandwidth_mbps * 1e6

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SimConfig:
        return cls(**json.loads(text))
