"""Tables that fit the terminal: drop the least useful columns first, shorten paths, never wrap.

``Column(name, priority)``: lower priority numbers are kept longest; the path column (``path=True``)
takes what the other columns leave, its cells shortened with the common directory said once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.table import Table

from readtrace.escape import printable

MIN_PATH = 16  # a path column narrower than this says nothing
CELL_PAD = 3  # rich's default box: one space each side plus the separator


@dataclass(frozen=True)
class Column:
    name: str
    priority: int = 0  # 0 = always shown; higher = dropped first when the width is short
    right: bool = True
    path: bool = False


def common_dir(paths: list[str]) -> str:
    """The directory every path shares ('' when fewer than two paths or nothing worth saying once)."""
    named = sorted({p for p in paths if p and p.startswith("/")})
    if len(named) < 2:
        return ""
    prefix = os.path.commonpath(named)
    if prefix in named:  # one path is the prefix itself: keep its own name visible
        prefix = os.path.dirname(prefix)
    return prefix if len(prefix) > 8 else ""


def shorten(path: str, width: int, prefix: str = "") -> str:
    """``path`` without ``prefix`` and cut in the middle to ``width`` characters (the file name stays)."""
    if prefix and path.startswith(prefix + "/"):
        path = "…" + path[len(prefix):]
    if len(path) <= width:
        return path
    name = os.path.basename(path)
    if len(name) + 2 >= width:
        return "…" + name[-(width - 1):]
    head = width - len(name) - 2
    return path[:head] + "…/" + name


def fitted_table(title: str, columns: list[Column], rows: list[list], width: int) -> Table:
    """A rich table of ``rows`` (strings or rich Text) that fits in ``width`` columns."""
    def cell_len(c) -> int:
        return len(c.plain if hasattr(c, "plain") else str(c))

    need = {i: max([len(c.name), *(cell_len(r[i]) for r in rows)]) + CELL_PAD for i, c in enumerate(columns)}
    keep = list(range(len(columns)))
    paths = [i for i, c in enumerate(columns) if c.path]
    budget = width - 1  # the table's left border
    for prio in sorted({c.priority for c in columns}, reverse=True):
        fixed = sum(need[i] for i in keep if i not in paths)
        if prio == 0 or fixed + (MIN_PATH + CELL_PAD) * len(paths) <= budget:
            break
        keep = [i for i in keep if columns[i].priority != prio]
    fixed = sum(need[i] for i in keep if i not in paths)
    path_width = max(MIN_PATH, (budget - fixed) // max(1, len(paths)) - CELL_PAD)
    prefixes = {i: common_dir([printable(r[i]) for r in rows]) for i in paths}
    full_title = title + "".join(f"  (… = {p})" for p in {prefixes[i] for i in paths if prefixes[i]})
    table = Table(title=full_title, title_justify="left")
    for i in keep:
        c = columns[i]
        table.add_column(c.name, justify="right" if c.right and not c.path else "left", no_wrap=True,
                         overflow="ellipsis", max_width=path_width if c.path else None)
    for r in rows:
        table.add_row(*[shorten(printable(r[i]), path_width, prefixes[i]) if i in paths
                        else printable(r[i]) if isinstance(r[i], str) else r[i] for i in keep])
    return table
