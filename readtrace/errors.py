"""The one user-facing error type and the exit codes it carries."""

from enum import IntEnum


class ExitStatus(IntEnum):
    """Exit codes of the readtrace command line."""

    OK = 0
    ERROR = 1
    USAGE = 2
    PREREQUISITE = 3  # not root, no bcc, no tracefs, no /dev/fuse ...
    BAD_TRACE = 4  # missing, corrupt, truncated or unknown-version trace
    BAD_INPUT = 5  # malformed safetensors file, bad checkpoint, bad mount point
    NO_EVIDENCE = 6  # fix --compare measured runs that cannot back a claim: nothing loaded or nothing evicted
    CANNOT_EXECUTE = 126  # the command exists but cannot be run (not executable, a directory)
    NOT_FOUND = 127  # the command to run does not exist
    INTERRUPTED = 130  # Ctrl-C


class ReadtraceError(Exception):
    """An error the user can act on: one line on stderr and an exit code, no traceback."""

    def __init__(self, message: str, exit_code: int = ExitStatus.ERROR):
        super().__init__(message)
        self.exit_code = int(exit_code)


class TraceError(ReadtraceError):
    """A trace that cannot be read: missing, corrupt, truncated or of an unknown version."""

    def __init__(self, message: str):
        super().__init__(message, ExitStatus.BAD_TRACE)


def command_error(e: BaseException) -> ReadtraceError | None:
    """A library's domain error as the command line reports it (None: not one it knows)."""
    from readtrace.loader.errors import CheckpointFormatError, DeviceUnavailableError, LoaderError

    if isinstance(e, ReadtraceError):
        return e
    if isinstance(e, CheckpointFormatError):
        return ReadtraceError(str(e), ExitStatus.BAD_INPUT)
    if isinstance(e, DeviceUnavailableError):
        return ReadtraceError(str(e), ExitStatus.PREREQUISITE)
    if isinstance(e, LoaderError):
        return ReadtraceError(str(e), ExitStatus.ERROR)
    return None
