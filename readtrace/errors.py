"""readtrace's errors, typed by what went wrong (one home for every package), and the named exit codes.

Library code raises these and knows nothing of flags or exit codes: a message that names one of the
caller's options writes ``{option}``, which reads as the parameter (``ring_mib``) in Python and as the
flag (``--ring-mib``) on the command line. ``readtrace.exits`` is the one place that turns an
error into a stderr line and an exit code. The loader's drop-in errors (``readtrace.loader.errors``)
are ValueError/RuntimeError/OSError, the way ``safetensors.torch.load_file`` raises them."""

from enum import IntEnum


class ExitStatus(IntEnum):
    """Exit codes of the readtrace command line (also a recorded command's own status: 127, 130)."""

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
    """An error the user can act on, said in one line (no traceback). Its subclasses say what kind."""

    def __init__(self, message: str, *, option: str | None = None):
        self.template = message
        self.option = option
        super().__init__(self.worded(option))

    def worded(self, spelling: str | None) -> str:
        """The message with the option it names spelled ``spelling`` (a parameter, a flag)."""
        return self.template.replace("{option}", spelling) if self.option and spelling else self.template

    def with_note(self, note: str) -> "ReadtraceError":
        """The same kind of error with ``note`` appended to its message."""
        return type(self)(f"{self.template} {note}", option=self.option)


class UsageError(ReadtraceError):
    """A value the caller gave is out of range, unknown or contradicts another."""


class PrerequisiteError(ReadtraceError):
    """Something the machine must provide is missing: root, bcc, tracefs, /dev/fuse, strace, a GPU."""


class TraceError(ReadtraceError):
    """A trace that cannot be read or used: missing, corrupt, truncated or of an unknown version."""


class InputError(ReadtraceError):
    """An input that is not what it must be: a checkpoint, a mount point, a log, a file to read."""


class NoEvidenceError(ReadtraceError):
    """Measured runs that cannot back a claim: nothing loaded, nothing evicted."""


class CommandNotFoundError(ReadtraceError):
    """The command to run does not exist."""


class CommandNotExecutableError(ReadtraceError):
    """The command exists but cannot be run (not executable, a directory)."""
