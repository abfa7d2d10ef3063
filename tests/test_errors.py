"""Library errors are typed and name no flag; the command line alone words them (flags) and picks the
exit code (readtrace.exits), the same codes README's "Guarantees" lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from readtrace import errors
from readtrace.errors import ExitStatus, InputError, ReadtraceError, UsageError
from readtrace.exits import EXIT_STATUS, error_line, exit_status
from readtrace.record.recorder import check_ring_mib
from readtrace.replace import check_target

PACKAGE = Path(errors.__file__).resolve().parent


def test_each_error_type_has_its_exit_code():
    kinds = {v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, ReadtraceError)}
    assert kinds <= {kind for kind, _ in EXIT_STATUS}
    codes = {kind: int(code) for kind, code in EXIT_STATUS}
    assert codes[errors.UsageError] == ExitStatus.USAGE and codes[errors.TraceError] == ExitStatus.BAD_TRACE
    assert exit_status(errors.CommandNotFoundError("x")) == 127 and exit_status(ReadtraceError("x")) == 1
    assert exit_status(KeyError("not ours")) is None


def test_an_option_reads_as_the_parameter_in_python_and_as_the_flag_on_the_command_line(tmp_path):
    with pytest.raises(UsageError) as e:
        check_ring_mib(3)
    assert str(e.value) == "ring_mib must be a power of two from 1 to 4096, not 3"
    assert error_line(e.value) == "--ring-mib must be a power of two from 1 to 4096, not 3"
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ReadtraceError) as e:
        check_target(tmp_path / "taken", force=False, is_ours=lambda p: True, what="trace")
    assert str(e.value).endswith("exists; use force to overwrite it")
    assert error_line(e.value).endswith("exists; use --force to overwrite it")
    noted = e.value.with_note("(the new trace is in x)")
    assert type(noted) is type(e.value) and error_line(noted).endswith("use --force to overwrite it (the new trace is in x)")
    assert error_line(InputError("a {option} in a path")) == "a {option} in a path"  # only a named option is filled


def test_library_code_raises_no_exit_code_and_names_no_flag():
    """Outside the command line (cli.py, commands/) no error is built with an exit code or a --flag."""
    built = re.compile(r"(?:Error|raise \w+)\((?:\s*f?[\"'][^\"']*--[a-z]|[^)]*ExitStatus)")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "cli.py" or rel.startswith("commands/"):
            continue
        offenders += [f"{rel}: {m.group(0)}" for m in built.finditer(path.read_text())]
    assert not offenders
