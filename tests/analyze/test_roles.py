"""Which files a report leads with: data files, not the interpreter's own (paths from real recordings)."""

from __future__ import annotations

import pandas as pd

from readtrace.analyze.views.roles import file_roles

CODE = [
    "/usr/lib/x86_64-linux-gnu/libc.so.6", "/work/main/.venv/lib/python3.11/site-packages/torch/__init__.py",
    "/root/.cache/x/__pycache__/m.cpython-311.pyc", "/work/main/readtrace.egg-info/PKG-INFO",
    "/work/main/.venv/lib/python3.11/site-packages/safetensors-0.8.0.dist-info/METADATA",
    "/work/main/.venv/bin/python3", "/usr/bin/python3.11", "/work/main/.venv/pyvenv.cfg",
    "/usr/lib/locale/C.utf8/LC_CTYPE", "/usr/share/locale/locale.alias", "/usr/lib/ssl/openssl.cnf",
    "/etc/localtime", "/usr/share/zoneinfo/UTC", "/proc/self/maps",
]
DATA = [
    "/mnt/bucket/model.safetensors", "/tmp/pipe/unet/config.json", "/data/pytorch_model.bin",
    "/mnt/etc/model.safetensors", "/home/u/python3/weights.pt", "/srv/ssl/shard-0001.safetensors", None,
]


def test_code_and_system_files_fold_and_data_files_lead():
    roles = file_roles(pd.Series(CODE + DATA, dtype=object))
    assert list(roles[:len(CODE)]) == ["code"] * len(CODE)
    assert list(roles[len(CODE):]) == ["data"] * len(DATA)  # unknown (None) stays data: never hidden
