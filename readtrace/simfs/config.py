"""The lab mount's settings: one dataclass, passed to the daemon process as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.simfs.model import PROFILES


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

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ReadtraceError(f"unknown simfs profile {self.profile!r} (choose from {', '.join(PROFILES)})",
                                 ExitStatus.USAGE)
        if self.latency_ms < 0 or (self.bandwidth_mbps is not None and self.bandwidth_mbps <= 0):
            raise ReadtraceError("simfs: latency must be >= 0 and bandwidth > 0", ExitStatus.USAGE)
        if self.max_read_kib < 4 or self.max_backend < 1:
            raise ReadtraceError("simfs: max_read_kib must be >= 4 and max_backend >= 1", ExitStatus.USAGE)

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
