"""``printable(text)``: text from a trace or the user (file names, commands) made safe to print: control
characters (ESC sequences that would drive the terminal, newlines that would fake report lines) and
bidirectional overrides become visible escapes. Every renderer and the error line use it."""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\x1b": "\\e", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text) -> str:
    """``text`` (any value: str() of it) with every control character written as an escape."""
    return _UNSAFE.sub(_escape, str(text))
