"""Checks shared by the commands: the flag is validated (and named) here, not in the library."""

from readtrace.errors import UsageError


def at_least_one(args, *names: str) -> None:
    """Refuse ``--NAME`` below 1, in one line (argparse's own errors print the usage too)."""
    for name in names:
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
