"""What each lever would leave the load at on this mount: the what-if model's time for the whole load with
that lever, from its own trace. The report advises a lever only where this predicts a gain
(``advise``); ``fix --compare`` runs its trials fastest predicted first (fix/predict.py). Both read the
same numbers: ``io_model`` (kept in a fix run's trace summary) and ``load_with``.

A load with a lever keeps what it did besides waiting on its data files (start-up, compute) and waits
what the model says the lever's reads cost: ``prefetch`` (the start-up prefetch), ``sequential`` (one
in-order reader per file: an own fd per worker, a populate) or ``own-fd`` (readtrace's own-fd loader:
those reads, at start-up where the mount drops the cache). The model cannot replay a library's own
lever (a pread backend, disable_mmap) or a read-ahead change: those carry no prediction and say so.
"""

from __future__ import annotations

from readtrace.analyze.storage import whatif
from readtrace.analyze.storage.measured import LEVERS

# The levers of findings (analyze/storage/measured.LEVERS) the model replays: its read pattern(s).
PATTERNS = {"prefetch": ("prefetch",), "own fd": ("sequential",), "own-fd loader": ("own-fd",)}
# readtrace's own-fd loader (large in-order reads on fds of its own, with the mount's probed streams):
# a lever of every finding with levers where the load reads through a call it routes (safetensors,
# torch.load); the interleave's own "own fd" is the same reads.
OWN_FD_LOADER = "own-fd loader"
# A lever predicted to save less than this share of the load's wall is "not expected to help": the
# model's walls were within 30 % on 52 of 60 recorded loads (docs/report.md), so a smaller predicted
# gain is not one to send a user after.
GAIN_MIN = 0.10
# a first byte measured from the load's own FUSE requests, not the probe's fresh opens (whatif.with_measured)
AS_RECORDED = "as the load's own requests met it"


def io_model(analysis, profile: whatif.Profile | None = None) -> dict | None:
    """The mount's model and ``whatif.fixed_io_s`` of an Analysis: the recorded wait on the data files
    and what the fixed read patterns would wait; None where no storage model applies (no profile).
    ``profile``: the Analysis' ``whatif.mount_profile`` where the caller has it."""
    profile = profile or whatif.mount_profile(analysis)
    if profile is None:
        return None
    measured = getattr(analysis, "measured", None)
    return {"profile": profile.name, "latency_ms": round(profile.latency_ms, 2),
            "bandwidth_mbps": profile.bandwidth_mbps, "probed": measured.date if measured is not None else None,
            "reader_streams": measured.reader_streams if measured is not None else 1,
            "latency_recorded": profile.latency_recorded,
            **whatif.fixed_io_s(analysis, profile)}


def load_with(wall_s: float, model: dict, patterns: tuple[str, ...]) -> tuple[float, str]:
    """(predicted wall seconds, how) of a load that took ``wall_s`` with its data read as the fastest
    of ``patterns`` ("recorded": as it was). Read otherwise, the load also pays the own time its
    recorded waits covered (``model["hidden"]``: several tasks reading; absent in a model kept before it)."""
    besides = max(wall_s - model["recorded"], 0.0) + (0.0 if patterns == ("recorded",) else model.get("hidden", 0.0))
    io = min(model.get(p, model["sequential"]) for p in patterns)  # "own-fd": not in a model kept before it
    how = "reads unchanged" if patterns == ("recorded",) else "+".join(patterns)
    source = (f"rates measured on this mount (readtrace probe {model['probed']}" if model.get("probed")
              else f"what-if model ({model['profile']}")
    as_recorded = f" {AS_RECORDED}" if model.get("latency_recorded") else ""
    return besides + io, (f"{source}, {model['latency_ms']:.1f} ms first byte{as_recorded}): "
                          f"{besides:.2f} s besides the data waits + {io:.2f} s waiting ({how})")


def levers_of(code: str, routed: bool) -> tuple[str, ...]:
    """The levers a finding ``code`` names; ``routed``: the load reads through a call readtrace routes."""
    named = LEVERS.get(code, ())
    if routed and named and "own fd" not in named:
        return (*named, OWN_FD_LOADER)
    return named


def advise(findings: list, wall_s: float | None, model: dict | None, remote: set[str], routed: bool = False) -> None:
    """Each finding on a remote file: its modelled levers' predicted times (``lever_predictions``), and
    those predicted to save under GAIN_MIN of the wall moved to ``not_expected``, with the numbers."""
    if model is None or not wall_s:
        return
    for f in findings:
        if f.file not in remote:
            continue
        ruled = {r["lever"] for r in f.not_expected}
        for lever in levers_of(f.code, routed):
            if lever in ruled or lever not in PATTERNS:
                continue
            predicted, how = load_with(wall_s, model, PATTERNS[lever])
            if predicted > (1 - GAIN_MIN) * wall_s:
                saved = 1 - predicted / wall_s
                f.not_expected.append({"lever": lever, "because": (
                    f"the load is predicted at ~{predicted:.1f} s with it against its {wall_s:.1f} s "
                    + (f"({100 * saved:.0f} % less, under the {100 * GAIN_MIN:.0f} % the model can tell; "
                       if saved > 0 else "(") + f"{how})")})
            else:
                f.lever_predictions.append({"lever": lever, "predicted_s": round(predicted, 3), "load_s": wall_s,
                                            "basis": how, "apply": _apply(lever, model)})


def _apply(lever: str, model: dict) -> str | None:
    """How to get a lever readtrace applies (its own-fd loader, with the readers it was predicted with)."""
    if lever != OWN_FD_LOADER:
        return None
    streams = model.get("reader_streams") or 1
    return "readtrace fix --strategy own-fd" + (f" --threads {streams}" if streams > 1 else "")
