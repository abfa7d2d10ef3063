"""Import Debian's bcc (python3-bpfcc) without putting /usr/lib/python3/dist-packages on sys.path.

The bcc module is plain Python over ctypes (libbcc.so.0), so any Python 3.11 can use it; adding the
whole dist-packages folder would drag Debian's other packages into the venv.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BCC_DIRS = (Path("/usr/lib/python3/dist-packages/bcc"), Path("/usr/lib/python3/site-packages/bcc"))


class BccImportError(Exception):
    """bcc is not installed or cannot be loaded."""


def load_bcc() -> ModuleType:
    """The bcc package: an already importable one, else Debian's, loaded by file location."""
    if "bcc" in sys.modules and hasattr(sys.modules["bcc"], "BPF"):
        return sys.modules["bcc"]
    for folder in BCC_DIRS:
        init = folder / "__init__.py"
        if not init.exists():
            continue
        spec = importlib.util.spec_from_file_location("bcc", init, submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["bcc"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # libbcc.so missing, ABI mismatch ...: report, do not crash
            del sys.modules["bcc"]
            raise BccImportError(f"{init}: {type(e).__name__}: {e}") from e
        return module
    raise BccImportError("bcc Python module not found (apt-get install -y python3-bpfcc bpfcc-tools)")
