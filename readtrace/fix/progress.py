"""Show a long ``fix --compare`` as it goes: which run, which candidate, elapsed, what is left.

On a terminal a live line (rich: spinner, the run, its elapsed seconds, the estimate of what is left)
under the plain lines; elsewhere (a pipe, a log file, ``--json``) only the plain lines, each with the
same figures: ``run 3 trial [readtrace own-fd] (cold: 1 file(s) evicted); 31 s elapsed, this run
~4 s, about 12 s left (estimate)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TextIO


def figures(elapsed_s: float, expect_s: float | None, left_s: float | None) -> str:
    """"31 s elapsed, this run ~4 s, about 12 s left (estimate)": what is known of them."""
    parts = [f"{elapsed_s:.0f} s elapsed"]
    if expect_s is not None:
        parts.append(f"this run ~{expect_s:.0f} s")
    if left_s is not None:
        parts.append(f"about {left_s:.0f} s left (estimate)")
    return ", ".join(parts)


class Progress:
    """Plain lines through ``say``; with ``live`` (a terminal) a rich live line besides."""

    def __init__(self, say: Callable[[str], None], stream: TextIO | None = None):
        self._say = say
        self._live = None
        if stream is not None and _is_terminal(stream):
            from rich.console import Console
            from rich.progress import Progress as Live
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = Live(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                              TextColumn("{task.fields[left]}"), console=Console(file=stream), transient=True)

    def say(self, line: str) -> None:
        if self._live is not None:
            self._live.console.print(f"readtrace: {line}", markup=False, highlight=False)
        else:
            self._say(line)

    @contextlib.contextmanager
    def running(self, what: str, expect_s: float | None = None, left_s: float | None = None,
                elapsed_s: float | None = None) -> Iterator[None]:
        """Around one run: the live line says ``what``, its elapsed time, the comparison's so far
        (``elapsed_s`` when it started), and about how much is left."""
        if self._live is None:
            yield
            return
        left = ", ".join(([] if elapsed_s is None else [f"{elapsed_s:.0f} s before it"])
                         + ([] if left_s is None else [f"about {left_s:.0f} s left"]))
        expect = "" if expect_s is None else f" (~{expect_s:.0f} s)"
        task = self._live.add_task(f"{what}{expect}", total=None, left=left)
        try:
            yield
        finally:
            self._live.remove_task(task)

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def quiet() -> Progress:
    """No live line (the plain lines go wherever ``compare``'s ``log`` sends them)."""
    return Progress(lambda line: None, None)

