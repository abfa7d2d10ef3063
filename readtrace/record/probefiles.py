"""The probe sources as files: probes/ (package data ``readtrace.probes``) and the record kinds its
header declares. Below both program.py (assembles the C) and records.py (the record layouts)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

HEADER = "readtrace.h"


def probe_text(name: str) -> str:
    """One file of probes/, the package data of ``readtrace.probes`` (in a wheel as in a checkout)."""
    try:
        probes = resources.files("readtrace.probes")
    except ModuleNotFoundError:  # an editable install made before probes/ was package data
        probes = Path(__file__).resolve().parents[2] / "probes"
    return probes.joinpath(name).read_text()


def kind_numbers() -> dict[str, int]:
    """RT_* record kinds parsed from probes/readtrace.h (one definition for C and Python)."""
    body = re.search(r"enum rt_kind \{(.*?)\};", probe_text(HEADER), re.S).group(1)
    return {name: int(num) for name, num in re.findall(r"RT_(\w+)\s*=\s*(\d+)", body)}
