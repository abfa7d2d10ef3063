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

