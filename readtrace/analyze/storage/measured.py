"""The measured mount profiles (readtrace probe) of a trace's files, and what they change in the
analysis: the knowledge table (fs/knowledge.py) is the prior, a profile measured on the mount the truth.

Where a profile comes from: the one the trace recorded (meta ``mount_profiles``, written by
``record``), else the cache's for that mount when it is mounted now with the same device and fstype
(a trace recorded before the mount was probed).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.fs.knowledge import FsProfile, fs_profile
from readtrace.measure.profile import MountProfile, cached, load_profiles, profile_in_meta

# Where the mount measurably punishes a shared handle, any clear interleave on one counts (the table's
# 0.3 score and 0.5 merged in-order fraction are for a file system only named, not measured): JuiceFS
# at score 0.27 paid 3x the GETs and 1.5x the time with one fd shared by 4 workers (issue 21).
MEASURED_MIN_SCORE = 0.15
MEASURED_MERGED_IN_ORDER_MAX = 0.85


def mount_profiles(meta: dict | None, files: pd.DataFrame) -> dict[str, MountProfile]:
    """mountpoint -> profile for each mount of ``files`` (columns path, dev, fstype, mountpoint) that
    has one."""
    out: dict[str, MountProfile] = {}
    mounts = files[["mountpoint", "fstype", "dev"]].dropna(subset=["mountpoint"]).drop_duplicates("mountpoint")
    missing = []
    for point, fstype, dev in mounts.itertuples(index=False):
        found = profile_in_meta(meta, point, fstype)
        if found is not None:
            out[point] = found
        else:
            missing.append((point, fstype, int(dev)))
    if missing and load_profiles():  # the cache is read only where the trace has none, and has some
        out.update(_cached_now(missing))
    return out


def _cached_now(wanted: list[tuple[str, str, int]]) -> dict[str, MountProfile]:
    """The cached profiles of those (mountpoint, fstype, dev) that are mounted now as they were."""
    from readtrace.fs.mounts import read_mounts

    try:
        now = {m.mountpoint: m for m in read_mounts()}  # later lines stack over earlier ones
    except OSError:
        return {}
    out = {}
    for point, fstype, dev in wanted:
        m = now.get(point)
        if m is not None and m.fstype == fstype and m.dev == dev and (found := cached(m)) is not None:
            out[point] = found
    return out


def main_profile(profiles: dict[str, MountProfile], files: pd.DataFrame) -> MountProfile | None:
    """The profile of the mount holding the largest file that has one (the checkpoint's)."""
    if not profiles:
        return None
    on = files[files["mountpoint"].isin(list(profiles))]
    if on.empty:
        return None
    return profiles[on.sort_values("size", ascending=False)["mountpoint"].iloc[0]]


def thresholds(th: Thresholds, profile: MountProfile | None) -> Thresholds:
    """The interleave rule as the measured per-handle penalty says: looser where sharing one open file
    measurably costs, unchanged elsewhere (a mount with no penalty is judged harmless in the findings).
    Thresholds the user set keep their value."""
    if profile is None or not profile.punishes_shared_handle:
        return th
    default = Thresholds()
    changes = {name: value for name, value in (("interleave_min_score", MEASURED_MIN_SCORE),
                                               ("interleave_merged_in_order_max", MEASURED_MERGED_IN_ORDER_MAX))
               if getattr(th, name) == getattr(default, name)}  # a value the user set (--threshold) stays
    return replace(th, **changes)


def judged(fstype: str | None, profile: MountProfile | None) -> FsProfile:
    """The table's prior for ``fstype`` with what the mount's measured profile says in its place."""
    prior = fs_profile(fstype)
    if profile is None:
        return prior
    return replace(prior, per_handle_stream=profile.punishes_shared_handle,
                   keeps_page_cache=profile.cache_survives_open, known=True,
                   source=f"measured {profile.date} (readtrace probe)")


# The levers each finding's recommendation names that a profile can rule out (report/prose.py words them).
LEVERS = {"SHARED_FD_INTERLEAVE": ("own fd", "prefetch"), "RANDOM_ON_FUSE_HANDLE": ("prefetch",),
          "SMALL_REQUESTS": ("prefetch",), "MMAP_FAULT_STORM": ("prefetch",), "COLD_CACHE": ("prefetch",),
          "SMALL_FUSE_READAHEAD": ("read_ahead_kb",)}


def not_expected(profile: MountProfile | None, code: str) -> list[dict]:
    """The levers of a finding ``code`` that ``profile`` measured cannot gain on its mount, each with why."""
    if profile is None:
        return []
    why = {}
    if not profile.cache_survives_open:
        why["prefetch"] = (f"the mount drops the page cache on every open (measured {profile.date}): pages "
                           "read ahead of the loader's own open are gone when it reads")
    if profile.readahead_helps is False:
        why["read_ahead_kb"] = (f"raising read_ahead_kb {profile.read_ahead_kb} -> {profile.readahead_tried_kb} "
                                f"changed a sequential read {profile.readahead_gain:.2f}x (measured {profile.date})")
    if not profile.punishes_shared_handle:
        why["own fd"] = (f"{profile.streams} readers on one open file took {profile.handle_penalty:.2f}x the time "
                         f"of one fd each (measured {profile.date}): no per-handle penalty")
    return [{"lever": lever, "because": why[lever]} for lever in LEVERS.get(code, ()) if lever in why]


def rule_out_levers(findings: list, profiles: dict[str, MountProfile], files: pd.DataFrame) -> None:
    """Fill each finding's ``not_expected`` from its file's mount profile; a finding whose only lever is
    ruled out (SMALL_FUSE_READAHEAD where read_ahead_kb measured no change) is INFO."""
    if not profiles:
        return
    mount_of = files.drop_duplicates("path").set_index("path")["mountpoint"]
    for f in findings:
        f.not_expected = not_expected(profiles.get(mount_of.get(f.file)), f.code) if f.file else []
        if f.not_expected and len(f.not_expected) == len(LEVERS.get(f.code, ())) and f.code == "SMALL_FUSE_READAHEAD":
            f.severity = "info"
