"""Split byte ranges into contiguous spans, one per reader (thread or rank)."""

from __future__ import annotations

from readtrace.fix.fileio import MiB

ALIGN = MiB  # span boundaries on MiB multiples keep every reader's requests page- and block-aligned


def split_spans(length: int, parts: int, *, align: int = ALIGN) -> list[tuple[int, int]]:
    """Cut ``[0, length)`` into at most ``parts`` contiguous, non-empty, aligned spans covering it."""
    if length <= 0:
        return []
    step = -(-length // parts)  # ceil
    step = -(-step // align) * align
    return [(start, min(start + step, length)) for start in range(0, length, step)]


def split_files(sizes: list[tuple[str, int]], parts: int, *, align: int = ALIGN
                ) -> list[list[tuple[str, int, int]]]:
    """Cut several files, taken as one byte stream, into ``parts`` contiguous shares.

    Returns one list per share of ``(path, start, end)`` pieces; a share may span several files, and
    every byte of every file is in exactly one share.
    """
    offsets, total = [], 0
    for _, size in sizes:
        offsets.append(total)
        total += size
    shares: list[list[tuple[str, int, int]]] = []
    for start, end in split_spans(total, parts, align=align):
        pieces = []
        for (path, size), base in zip(sizes, offsets, strict=True):
            lo, hi = max(start, base), min(end, base + size)
            if lo < hi:
                pieces.append((path, lo - base, hi - base))
        shares.append(pieces)
    return shares
