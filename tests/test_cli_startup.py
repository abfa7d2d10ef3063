"""`readtrace --help` stays cheap: no command imports a heavy library before it runs."""

import subprocess
import sys

HEAVY = ("pandas", "numpy", "torch", "pyarrow", "matplotlib", "rich", "safetensors", "bcc", "mfusepy")


def test_help_imports_no_heavy_library():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "readtrace", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "usage: readtrace" in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "readtrace.cli" in imported  # the measurement saw our imports
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


def test_commands_run_without_numpy_huge_pages_unless_the_user_asks():
    """Our arrays are touched once: small pages are faster to fault in on this kind of VM (readtrace.memory.small_pages)."""
    import os

    probe = ("from readtrace.cli import main; main(['report', '/nonexistent.rtrace'])\n"
             "from numpy._core.multiarray import _get_madvise_hugepage; print(_get_madvise_hugepage())")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    for extra, expected in (({}, "False"), ({"NUMPY_MADVISE_HUGEPAGE": "1"}, "True")):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**env, **extra})
        assert out.stdout.strip() == expected, out.stderr
