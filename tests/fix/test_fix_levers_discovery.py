"""Which loader levers the installed libraries offer, found without importing torch in the host."""

import inspect
import subprocess
import sys

from readtrace.fix.levers import _safetensors_has_backend


def test_the_backend_lever_is_read_from_the_source_as_the_import_would_say():
    from safetensors.torch import load_file

    assert _safetensors_has_backend() == ("backend" in inspect.signature(load_file).parameters)


def test_finding_it_imports_no_torch():
    code = ("import sys; from readtrace.fix.levers import levers_for; levers_for({'load_file'}); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
