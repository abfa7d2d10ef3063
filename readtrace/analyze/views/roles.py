"""What a file is to a load: ``data`` (checkpoints, anything the load reads as input) or ``code``
(shared libraries, Python modules and bytecode, interpreter and package metadata). Reports lead with
data files and fold code into one line: a load's libraries are noise for its I/O pattern."""

from __future__ import annotations

import numpy as np
import pandas as pd

CODE_PATTERN = (
    r"(?:\.so(?:\.\d+)*|\.py|\.pyc|\.pyo|\.pyi|\.pyd|\.pth|\.typed|\.a|\.dylib)$"  # libraries and modules
    r"|/[^/]+\.(?:dist|egg)-info/"  # package metadata (installed or an editable checkout's)
    r"|/pyvenv\.cfg$|/bin/python[\d.]*$"  # the interpreter and its venv
    r"|^/(?:proc|sys|dev)/"  # kernel interfaces
    r"|^/etc/|^/usr/(?:lib|share)/(?:locale|zoneinfo|ssl)/"  # system configuration, locales, time zones
    r"|/ld\.so\.cache$|/locale-archive$|/gconv/"
)


# readtrace's own files in a recording: its Python calls log (record/pycalls.py), the shim's hook
# directory (rerun/environment.py), fix's work directory, its state files (runstate.state_dir). Not the
# demo's directory: it holds the checkpoint the load reads.
OWN_PATTERN = (r"/readtrace-calls-[^/]*\.jsonl$|/readtrace-(?:shim|fix)-[^/]*/"
               r"|^/run/readtrace/|^/tmp/readtrace-\d+/|/readtrace/[a-z]+-\d+-[0-9a-f]{6}\.json$")


def file_roles(paths: pd.Series) -> np.ndarray:
    """``"code"``, ``"data"`` or ``"own"`` (readtrace's own files: never in a report) per path (unknown
    paths are data: never hide what we cannot name)."""
    text = paths.astype(object).where(paths.notna(), "").astype(str)
    is_code = text.str.contains(CODE_PATTERN, regex=True).to_numpy(dtype=bool)
    is_own = text.str.contains(OWN_PATTERN, regex=True).to_numpy(dtype=bool)
    return np.where(is_own, "own", np.where(is_code, "code", "data"))
