"""Split byte ranges into contiguous spans, one per reader (thread or rank)."""

from __future__ import annotations

from readtrace.loader.fileio import MiB

ALIGN = MiB  # span boundaries on MiB multiples keep every reader's requests page- and block-aligned


def split_spans(length: int, parts: int, *, align: int = ALIGN) -> list[tuple[int, int]]:
    """Cut ``[0, length)`` into at most ``parts`` contiguous, non-empty, aligned spans covering it."""
    if length <= 0:
        return []
    step = -(-length // parts)  # ceil
    step = -(-step // align) * align
    return [(start, min(start + step, length)) for start in range(0, length, step)]


Piece = tuple[str, int, int]  # (path, start, end): one byte range of one file


def split_pieces(pieces: list[Piece], parts: int, *, align: int = ALIGN) -> list[list[Piece]]:
    """Cut file ranges, taken in order as one byte stream, into ``parts`` contiguous shares.

    Returns one list of pieces per share; a share may span several files, and every byte of every
    input piece is in exactly one share, in order.
    """
    bases, total = [], 0
    for _, start, end in pieces:
        bases.append(total)
        total += end - start
    shares: list[list[Piece]] = []
    for lo, hi in split_spans(total, parts, align=align):
        share = []
        for (path, start, end), base in zip(pieces, bases, strict=True):
            a, b = max(lo, base), min(hi, base + end - start)
            if a < b:
                share.append((path, start + a - base, start + b - base))
        shares.append(share)
    return shares
