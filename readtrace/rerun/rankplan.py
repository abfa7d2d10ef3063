"""Which bytes each rank of a torchrun job prefetches in a fixed run: its own spans, or a share.

From a trace of the job (``Analysis.rank_spans``: each rank's merged byte spans): when the ranks read
different spans (a rank-sharded load), each rank prefetches only the spans it reads (spans closer
than ``GAP`` merged, page-aligned); when every rank reads all of every file, the files are split over
the node's local ranks (LOCAL_RANK / LOCAL_WORLD_SIZE), so each byte is fetched once per node and no
rank reads what it does not need. Without a trace (runs not recorded) only the split is possible.
The plan travels to the rerun as a JSON file (``protocol.Rerun.prefetch_plan``); the start-up
prefetch of each rank reads its pieces (``inject.startup``). Imports no torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from readtrace.loader.spans import Piece, split_pieces
from readtrace.replace import new_file

SPANS, SPLIT = "spans", "split"
WHOLE = 0.9  # a rank whose spans cover this much of every file reads "all of it"
GAP = 1 << 20  # spans closer than this are merged: reading the gap costs less than another request
PAGE = 4096


@dataclass(frozen=True)
class RankPlan:
    mode: str  # SPANS or SPLIT
    files: tuple[str, ...]
    why: str
    spans: dict[int, tuple[Piece, ...]] = field(default_factory=dict)  # SPANS: per global rank

    def pieces(self, rank: int, local_rank: int, local_world: int) -> list[Piece]:
        """What this rank prefetches: its spans, or its share of the whole files."""
        if self.mode == SPANS:
            return list(self.spans.get(rank, ()))  # a rank the trace did not see reads for itself
        whole = [(f, 0, os.stat(f).st_size) for f in self.files if os.path.isfile(f)]
        return split_pieces(whole, local_world)[local_rank] if 0 <= local_rank < local_world else whole

    def bytes_by_rank(self) -> dict[int, int] | None:
        """SPANS: bytes each rank prefetches (SPLIT: decided by the ranks at run time: None)."""
        if self.mode != SPANS:
            return None
        return {r: sum(end - start for _, start, end in pieces) for r, pieces in sorted(self.spans.items())}

    def to_json(self) -> dict:
        return {"mode": self.mode, "files": list(self.files), "why": self.why,
                "spans": {str(r): [list(p) for p in pieces] for r, pieces in self.spans.items()}}

    def save(self, path: str | os.PathLike) -> None:
        with os.fdopen(new_file(path), "w", encoding="utf-8") as f:  # never through a planted link
            json.dump(self.to_json(), f)

    @classmethod
    def load(cls, path: str | os.PathLike) -> RankPlan:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        spans = {int(r): tuple((str(p), int(s), int(e)) for p, s, e in pieces)
                 for r, pieces in data.get("spans", {}).items()}
        return cls(data["mode"], tuple(data["files"]), data.get("why", ""), spans)


def split_plan(files, why: str) -> RankPlan:
    return RankPlan(SPLIT, tuple(files), why)


def plan_from_spans(rank_spans: dict[int, list[Piece]], files) -> RankPlan | None:
    """The plan for a job whose ranks touched ``rank_spans`` (rank -> [(path, start, end)]) of the
    comparison's checkpoint ``files``; None when no rank touched any of them."""
    real = {os.path.realpath(f): f for f in files}
    sizes = {f: os.stat(f).st_size for f in files if os.path.isfile(f)}
    mine: dict[int, list[Piece]] = {}
    for rank, pieces in rank_spans.items():
        for path, start, end in pieces:
            f = real.get(os.path.realpath(path))
            if f in sizes and end > start:
                mine.setdefault(int(rank), []).append((f, start, min(end, sizes[f])))
    if not mine:
        return None
    covered = {r: {f: sum(e - s for p, s, e in pieces if p == f) for f in sizes} for r, pieces in mine.items()}
    if all(covered[r][f] >= WHOLE * sizes[f] for r in covered for f in sizes if sizes[f]):
        return split_plan(files, f"every rank of the trace ({len(mine)}) read all of every file: the files are "
                                 "split over each node's local ranks")
    spans = {r: tuple(_merged(pieces, sizes)) for r, pieces in sorted(mine.items())}
    return RankPlan(SPANS, tuple(files), f"the ranks of the trace ({len(mine)}) read different byte spans: each "
                    "prefetches only its own", spans)


def _merged(pieces: list[Piece], sizes: dict[str, int]) -> list[Piece]:
    """Page-aligned, sorted, with spans closer than GAP merged."""
    out: list[list] = []
    for path, start, end in sorted(pieces):
        start, end = start - start % PAGE, min(sizes[path], -(-end // PAGE) * PAGE)
        if out and out[-1][0] == path and start <= out[-1][2] + GAP:
            out[-1][2] = max(out[-1][2], end)
        else:
            out.append([path, start, end])
    return [(p, s, e) for p, s, e in out]
