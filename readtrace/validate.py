"""One validator for the numbers and paths users give (options, ``--threshold``, simfs settings):
``Range.parse`` checks kind, finiteness and range; ``arg(Range)`` and the path checks are argparse types.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Valid values: ``kind`` (int or float), finite, ``low`` <= v (< v with ``low_open``) <= ``high``."""

    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def describe(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]"
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{what} <= {_num(self.high)}"
        return what

    def parse(self, text: str | int | float):
        """The value of ``text``; ValueError saying what was expected."""
        try:
            value = self.kind(text) if not isinstance(text, str) else _from_text(self.kind, text)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{text!r} is not {self.describe()}") from None
        if isinstance(value, float) and not math.isfinite(value) or not self.holds(value):
            raise ValueError(f"{text!r} is not {self.describe()}")
        return value

    def holds(self, value) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


def _from_text(kind: type, text: str):
    text = text.strip()
    return int(text, 10) if kind is int else float(text)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


NON_NEGATIVE_INT = Range(int, 0)
POSITIVE_INT = Range(int, 0, low_open=True)
FRACTION = Range(float, 0, 1)
NON_NEGATIVE = Range(float, 0)
POSITIVE = Range(float, 0, low_open=True)


def arg(valid: Range):
    """An argparse ``type=`` that accepts only ``valid`` values (a usage error otherwise)."""
    def parse(text: str):
        try:
            return valid.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = valid.describe()  # argparse names the type in its message
    return parse


def regular_file(text: str) -> str:
    """argparse type: an existing regular file (a checkpoint to read or evict)."""
    try:
        mode = os.stat(text).st_mode
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise argparse.ArgumentTypeError(f"{text}: not a regular file" + (" (a directory: name the files in it)"
                                                                          if stat.S_ISDIR(mode) else ""))
    return text


def directory(text: str) -> str:
    """argparse type: a directory to write into: an existing one, or a path that can be created."""
    if os.path.lexists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text}: exists and is not a directory")
    return text


def json_value(text: str | bytes, **options):
    """``json.loads(text)`` for input readtrace did not write (a trace, a log, a checkpoint header):
    nesting too deep for the parser is a ValueError like any other malformed JSON, not a RecursionError."""
    import json

    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
