"""A measured mount profile in words (``readtrace probe``, ``--show``) and the report's one line on it."""

from __future__ import annotations

import shlex

from readtrace.measure.profile import HANDLE_PENALTY_MIN, READAHEAD_GAIN_MIN, MountProfile

MiB = 1 << 20
PRIOR = "no profile: table prior (fs/knowledge.py)"


def profile_lines(p: MountProfile) -> list[str]:
    """The profile, one fact a line."""
    penalty = p.handle_penalty
    verdict = (f">= {HANDLE_PENALTY_MIN}x: the mount punishes readers sharing one open file"
               if p.punishes_shared_handle else "sharing one open file costs nothing measurable")
    lines = [
        f"{p.mountpoint} ({p.fstype}, {p.source or '-'}, dev {p.dev}): measured {p.date} in {p.seconds:.1f} s",
        f"  read {p.file} ({p.file_size / MiB:.0f} MiB), samples of {p.sample_bytes / MiB:.0f} MiB "
        f"({p.handle_bytes / MiB:.0f} MiB for the handle test)",
        f"  first byte: {p.first_byte_ms:.1f} ms median, {p.first_byte_max_ms:.1f} ms max of {p.first_byte_samples} "
        f"cold reads at random offsets (open: {p.open_ms:.1f} ms)",
        f"  bandwidth: {p.sequential_mbps:.0f} MB/s one stream, {p.parallel_mbps:.0f} MB/s {p.streams} streams "
        f"(own fd each{f', over {p.parallel_sample / MiB:.0f} MiB' if p.parallel_sample != p.sample_bytes else ''})",
        f"  per-handle penalty: {'>= ' if p.shared_fd_stopped else ''}{penalty:.2f}x ({p.streams} readers on ONE open file {p.shared_fd_s:.2f} s{' (stopped)' if p.shared_fd_stopped else ''}, "
        f"one fd each {p.own_fd_s:.2f} s): {verdict}",
        f"  page cache after another open: {'kept' if p.cache_survives_open else 'dropped'}",
    ]
    request = f"{p.request_kib} KiB" if p.request_kib else "unknown"
    ra = f"read_ahead_kb {p.read_ahead_kb}" if p.read_ahead_kb is not None else "no read_ahead_kb"
    lines.append(f"  requests: {ra}, max_read {f'{p.max_read_kib} KiB' if p.max_read_kib else 'not set'}: "
                 f"buffered reads reach the daemon in requests of up to {request}")
    if p.readahead_gain is None:
        lines.append("  read_ahead_kb: not tried (needs root and a bdi entry)")
    else:
        lines.append(f"  read_ahead_kb {p.read_ahead_kb} -> {p.readahead_tried_kb}: 64 KiB reads "
                     f"{p.readahead_old_s:.2f} s -> {p.readahead_new_s:.2f} s ({p.readahead_gain:.2f}x: "
                     f"{_effect(p.readahead_gain)}; restored)")
    return lines


def basis_line(p: MountProfile | None, mountpoint: str | None = None) -> str:
    """Where the report's judgement of the mount comes from (``mountpoint``: the checkpoint's, named
    in the command that would measure it)."""
    if p is None:
        return f"{PRIOR}; measure the mount: readtrace probe {shlex.quote(mountpoint)}" if mountpoint else PRIOR
    return (f"mount profile: measured {p.date} ({p.mountpoint}: first byte {p.first_byte_ms:.1f} ms, "
            f"{p.parallel_mbps:.0f} MB/s, per-handle penalty {p.handle_penalty:.2f}x, page cache "
            f"{'kept' if p.cache_survives_open else 'dropped'} on open)")


def _effect(gain: float) -> str:
    if gain >= READAHEAD_GAIN_MIN:
        return "helps"
    return "slower" if gain * READAHEAD_GAIN_MIN <= 1 else "no change"
