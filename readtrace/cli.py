"""``readtrace`` entry point: parse arguments, run one command, map errors to exit codes."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from readtrace import __version__
from readtrace.commands import COMMANDS
from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.escape import degrade_unencodable
from readtrace.exits import HANDLED, fail
from readtrace.memory import small_pages


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block) and exit 2."""

    def error(self, message: str):
        self.exit(ExitStatus.USAGE, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="readtrace",
        description="Why is a model load slow on FUSE / network file systems? Record it, report it, fix it.",
    )
    parser.add_argument("--version", action="version", version=f"readtrace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip()
        cmd = sub.add_parser(name, help=doc.splitlines()[0] if doc else None, description=doc,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        cmd.set_defaults(run=module.run)
    return parser


class _CheckedStream:
    """Standard output whose write errors (a full disk, an I/O error) are one ReadtraceError line."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _checked(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise ReadtraceError(f"cannot write standard output: {e.strerror or e}") from None

    def write(self, text):
        return self._checked(self._stream.write, text)

    def flush(self):
        return self._checked(self._stream.flush)


class _ClosedStream:
    """Standard output the caller closed (``>&-``; Python then sets sys.stdout to None)."""

    def write(self, text):
        raise ReadtraceError("cannot write standard output: it is closed")

    def flush(self):
        pass

    def isatty(self):
        return False


@contextlib.contextmanager
def checked_stdout():
    """Run with stdout checked and flushed at the end (write errors: one line, not a traceback)."""
    stream = sys.stdout
    sys.stdout = checked = _CheckedStream(stream if stream is not None else _ClosedStream())
    try:
        yield
        checked.flush()
    finally:
        sys.stdout = stream


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed its line (or --help): its code is ours to return
        return e.code if isinstance(e.code, int) else ExitStatus.USAGE
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return ExitStatus.USAGE
    small_pages()
    degrade_unencodable(sys.stdout, sys.stderr)
    try:
        with checked_stdout():
            return int(args.run(args) or 0)
    except HANDLED as e:  # library errors become exit codes here, and only here
        return fail("readtrace", e)
    except FileNotFoundError:
        if _cwd_exists():
            raise
        print("readtrace: the current directory no longer exists (deleted?): cd to an existing one",
              file=sys.stderr)
        return ExitStatus.USAGE
    except KeyboardInterrupt:
        print("readtrace: interrupted", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        return ExitStatus.OK


if __name__ == "__main__":
    sys.exit(main())
