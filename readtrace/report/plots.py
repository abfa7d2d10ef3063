"""Figures of a report. ``get_<x>_df(analysis)`` returns the data; ``plot_<x>(df, ax=None)`` draws it.

An empty DataFrame means "nothing to draw"; ``missing_<x>(analysis)`` says why in one line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze import Analysis
from readtrace.analyze.views.accesses import SOURCE_FAULT, SOURCE_READ
from readtrace.analyze.views.histogram import LABELS, histogram

MAX_POINTS = 20_000  # per scatter plot: evenly thinned beyond this, the shape stays
MiB = 1 << 20


def time_origin(a: Analysis) -> int:
    stamps = [s.min() for s in (a.app.ts, a.fuse.ts, a.pages["ts_ns"].to_numpy()) if len(s)]
    return int(a.meta.get("t0_ns") or (min(stamps) if stamps else 0))


def _thin(df: pd.DataFrame, max_points: int) -> pd.DataFrame:
    if len(df) <= max_points:
        return df
    return df.iloc[np.linspace(0, len(df) - 1, max_points).astype(np.int64)]


def top_file(a: Analysis) -> int | None:
    return int(a.files.index[0]) if len(a.files) else None


def get_offset_time_df(a: Analysis, view: str = "task", max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Accesses to the most-read file: time (s), offset (MiB), bytes, and the series to colour by:
    ``task`` = read()/fault by the task that made it; ``handle`` = FUSE READ by handle and requester."""
    file = top_file(a)
    acc = a.app if view == "task" else a.fuse
    if file is None or len(acc) == 0:
        return pd.DataFrame(columns=["t_s", "offset_mib", "bytes", "series"])
    rows = np.flatnonzero(acc.file == file)
    rows = rows[np.argsort(acc.ts[rows], kind="stable")]
    if view == "task":
        series = pd.Series(acc.tid[rows]).map(lambda t: f"tid {t}")
    else:
        fh = a.handles["fh"].to_numpy()[acc.handle[rows]]
        series = pd.Series([f"handle {h}, tid {t}" for h, t in zip(fh, acc.tid[rows], strict=True)])
    df = pd.DataFrame({"t_s": (acc.ts[rows] - time_origin(a)) / 1e9, "offset_mib": acc.offset[rows] / MiB,
                       "bytes": acc.nbytes[rows], "series": series.to_numpy()})
    return _thin(df, max_points)


def plot_offset_time(df: pd.DataFrame, ax=None, title: str = "", max_series: int = 16, connect: bool = False):
    """Offset against time, one colour per series; ``connect`` draws the merged order as a thin line
    (how a handle's stream jumps between the tasks' regions)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    if connect:
        ax.plot(df["t_s"], df["offset_mib"], lw=0.4, color="grey", alpha=0.6, zorder=0, label="request order")
    top = df["series"].value_counts().index[:max_series]
    for name in sorted(top, key=str):
        part = df[df["series"] == name]
        ax.scatter(part["t_s"], part["offset_mib"], s=4, label=name, linewidths=0)
    rest = df[~df["series"].isin(top)]
    if len(rest):
        ax.scatter(rest["t_s"], rest["offset_mib"], s=4, color="grey", label="other", linewidths=0)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("file offset (MiB)")
    ax.set_title(title)
    ax.legend(fontsize=7, markerscale=3, loc="best", ncols=2)
    ax.grid(alpha=0.3)
    return ax


def get_size_histogram_df(a: Analysis) -> pd.DataFrame:
    """Access counts per Darshan size bin: read() calls, mmap faults and FUSE READ requests."""
    cols = {}
    for name, acc, mask in (("read()", a.app, a.app.source == SOURCE_READ),
                            ("mmap faults", a.app, a.app.source == SOURCE_FAULT),
                            ("FUSE READ", a.fuse, np.ones(len(a.fuse), bool))):
        if mask.any():
            cols[name] = histogram(np.zeros(int(mask.sum()), np.int64), 1, acc.nbytes[mask])[0]
    return pd.DataFrame(cols, index=pd.Index(LABELS, name="size"))


def plot_size_histogram(df: pd.DataFrame, ax=None, title: str = "Access sizes (Darshan bins)"):
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    width = 0.8 / max(1, len(df.columns))
    x = np.arange(len(df))
    for i, col in enumerate(df.columns):
        ax.bar(x + i * width - 0.4 + width / 2, df[col], width, label=col)
    ax.set_xticks(x, df.index, rotation=30, fontsize=8)
    ax.set_ylabel("accesses")
    ax.set_yscale("symlog")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax


def get_cache_misses_df(a: Analysis, bins: int = 120) -> pd.DataFrame:
    """Page-cache misses (bytes fetched) per time bin and cumulated, and bytes read by the app per bin."""
    miss = a.pages[a.pages["op"] == "miss"]
    if miss.empty:
        return pd.DataFrame(columns=["t_s", "miss_mib", "cumulative_miss_mib", "read_mib"])
    t0 = time_origin(a)
    end = max(int(miss["ts_ns"].max()), int(a.app.ts.max()) if len(a.app) else 0)
    edges = np.linspace(t0, end + 1, bins + 1)
    m = np.histogram(miss["ts_ns"], edges, weights=miss["size"])[0] / MiB
    r = np.histogram(a.app.ts, edges, weights=a.app.nbytes)[0] / MiB if len(a.app) else np.zeros(bins)
    return pd.DataFrame({"t_s": (edges[:-1] - t0) / 1e9, "miss_mib": m, "cumulative_miss_mib": np.cumsum(m),
                         "read_mib": r})


def plot_cache_misses(df: pd.DataFrame, ax=None, title: str = "Page-cache misses over time"):
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    width = float(df["t_s"].diff().median()) if len(df) > 1 else 1.0
    ax.bar(df["t_s"], df["read_mib"], width, align="edge", alpha=0.4, label="read by the app (MiB)")
    ax.bar(df["t_s"], df["miss_mib"], width, align="edge", alpha=0.8, label="missed the cache (MiB)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("MiB per bin")
    twin = ax.twinx()
    twin.plot(df["t_s"] + width, df["cumulative_miss_mib"], color="black", label="cumulative misses")
    twin.set_ylabel("cumulative misses (MiB)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def get_prediction_df(a: Analysis, predictions: list) -> pd.DataFrame:
    """Measured vs predicted load time (s): the recorded run split into its wait on data files and the
    rest, and per storage profile the prediction as recorded and fixed, split the same way (computed by
    analyze/storage/whatif.py: the --what-if profiles, or own_mount_predictions)."""

    wall = a.summary.wall_s
    if wall is None:
        return pd.DataFrame(columns=["run", "rest_s", "io_s"])
    wait = a.summary.time.data_wait_s or 0.0
    fixed_rest = wall - wait + a.summary.time.besides_hidden_s  # what_if's predicted_fixed_s, less its I/O
    rows = [("measured", wall - wait, wait)]
    for p in predictions:
        rows += [(f"{p.profile} {p.latency_ms:.3g} ms", wall - wait, p.predicted_io_s),
                 (f"{p.profile} {p.latency_ms:.3g} ms, fixed", fixed_rest, p.predicted_fixed_io_s)]
    return pd.DataFrame(rows, columns=["run", "rest_s", "io_s"])


def prediction_caveat(a: Analysis, own: list) -> str | None:
    """A warning to print by the chart when the model's prediction of this very recording on its own
    mount is off the measured wall by more than ``thresholds.prediction_caveat_fraction``."""
    wall = a.summary.wall_s
    if not own or not wall or own[0].predicted_s is None:
        return None
    p = own[0]
    off = p.predicted_s / wall - 1
    if abs(off) <= a.thresholds.prediction_caveat_fraction:
        return None
    return (f"Caveat: the model predicts this recording at {p.predicted_s:.3g} s on its own mount ({p.profile} "
            f"model, {p.latency_ms:.3g} ms first byte) where it measured {wall:.3g} s: {abs(off):.0%} "
            f"{'over' if off > 0 else 'under'}. Its other predictions here (the bars, the fixed time) are rough "
            "by at least as much.")


def plot_prediction(df: pd.DataFrame, ax=None, title: str = "Measured vs predicted load time"):
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    y = np.arange(len(df))
    ax.barh(y, df["rest_s"], color="#9e9e9e", label="start-up, compute, other waits (carried over)")
    ax.barh(y, df["io_s"], left=df["rest_s"], color="#c62828", label="waiting on the data files")
    ax.set_yticks(y, df["run"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    return ax


def missing_reason(a: Analysis, figure: str) -> str | None:
    """Why a figure has nothing to draw, or None when it has."""
    if figure == "prediction" and a.summary.wall_s is None:
        return "no wall time in this trace"
    if figure == "offset_time_task" and len(a.app) == 0:
        return "no read() calls or mmap faults with a known offset in this trace"
    if figure == "offset_time_handle" and len(a.fuse) == 0:
        return ("no FUSE READ requests in this trace: the files are not on a FUSE mount, or the recorder "
                "did not decode the daemon's requests")
    if figure == "size_histogram" and len(a.app) == 0 and len(a.fuse) == 0:
        return "no accesses in this trace"
    if figure == "cache_misses" and not (a.pages["op"] == "miss").any():
        return ("no page-cache misses recorded" if len(a.pages)
                else "no page-cache view in this trace (filemap tracepoints were not recorded)")
    return None
