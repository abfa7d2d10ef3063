"""``printable(text)``: text from a trace or the user (file names, commands) made safe to print: control
characters (ESC sequences that would drive the terminal, newlines that would fake report lines) and
bidirectional overrides become visible escapes. Every renderer and the error line use it.
``degrade_unencodable``: an output whose encoding cannot write a character gets an ASCII stand-in."""

from __future__ import annotations

import codecs
import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\x1b": "\\e", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(c: str) -> str:
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def _escape(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or _escaped(c)


def printable(text) -> str:
    """``text`` (any value: str() of it) with every control character written as an escape."""
    return _UNSAFE.sub(_escape, str(text))


_ASCII = {"…": "...", "µ": "u", "→": "->", "←": "<-", "×": "x", "≈": "~", "≥": ">=", "≤": "<=", "—": "-",
          "–": "-", "‘": "'", "’": "'", "“": '"', "”": '"'}
ENCODE_ERRORS = "readtrace-ascii"  # codecs error handler: what an output encoding cannot write


def _degrade(error: UnicodeEncodeError) -> tuple[str, int]:
    text = error.object[error.start:error.end]
    return "".join(_ASCII.get(c) or _escaped(c) for c in text), error.end


def degrade_unencodable(*streams) -> None:
    """Let each text stream write what its encoding cannot (PYTHONIOENCODING=ascii, a C locale) as
    ASCII ("…" as "...", other characters as escapes) instead of raising UnicodeEncodeError (stdout)
    or writing "\\u2026" (stderr)."""
    codecs.register_error(ENCODE_ERRORS, _degrade)
    for stream in streams:
        if stream is not None and hasattr(stream, "reconfigure") and stream.errors in ("strict", "backslashreplace"):
            stream.reconfigure(errors=ENCODE_ERRORS)
