"""The one place where an error becomes what the user sees: one stderr line and an exit code.
Beside errors.py, not in commands/: the example loaders' mains use it without importing the commands."""

from __future__ import annotations

import sys

from readtrace.errors import (
    CommandNotExecutableError,
    CommandNotFoundError,
    ExitStatus,
    InputError,
    NoEvidenceError,
    PrerequisiteError,
    ReadtraceError,
    TraceError,
    UsageError,
)
from readtrace.loader.errors import CheckpointFormatError, DeviceUnavailableError, LoaderError

# First match wins: the loader's errors are ValueError/RuntimeError, so they come before UsageError.
EXIT_STATUS: tuple[tuple[type[BaseException], ExitStatus], ...] = (
    (CheckpointFormatError, ExitStatus.BAD_INPUT),
    (DeviceUnavailableError, ExitStatus.PREREQUISITE),
    (LoaderError, ExitStatus.ERROR),
    (UsageError, ExitStatus.USAGE),
    (PrerequisiteError, ExitStatus.PREREQUISITE),
    (TraceError, ExitStatus.BAD_TRACE),
    (InputError, ExitStatus.BAD_INPUT),
    (NoEvidenceError, ExitStatus.NO_EVIDENCE),
    (CommandNotFoundError, ExitStatus.NOT_FOUND),
    (CommandNotExecutableError, ExitStatus.CANNOT_EXECUTE),
    (ReadtraceError, ExitStatus.ERROR),
)

HANDLED = (ReadtraceError, LoaderError)  # what a command's main turns into a line and a code


def exit_status(e: BaseException) -> int | None:
    """The exit code for a library error (None: not one readtrace raises on purpose)."""
    return next((int(code) for kind, code in EXIT_STATUS if isinstance(e, kind)), None)


def flag(option: str) -> str:
    """A library parameter as its command-line flag: ``ring_mib`` -> ``--ring-mib``."""
    return "--" + option.replace("_", "-")


def error_line(e: BaseException) -> str:
    """The error's message as the command line says it (options named by their flags)."""
    return e.worded(flag(e.option)) if isinstance(e, ReadtraceError) and e.option else str(e)


def fail(prog: str, e: BaseException) -> int:
    """Say ``e`` in one stderr line as ``prog`` and return its exit code (a command's main ends here)."""
    from readtrace.escape import printable

    print(f"{prog}: {printable(error_line(e))}", file=sys.stderr)
    return exit_status(e)
