"""auto's own-fd-per-forked-worker candidate: offered exactly where the baseline's forked workers
inherited the parent's open checkpoint file; and fix --compare finds that file by itself for a raw
pread fork pool (the compat suite's fork_pool script, real multiprocessing workers)."""

from __future__ import annotations

import json

from lab.loaders import LOADERS
from readtrace.fix.candidates import candidates
from readtrace.fix.compare import compare
from readtrace.fix.levers import NO_FORKED_SHARING
from readtrace.rerun.protocol import OWN_FD_PER_FORK
from readtrace.rerun.records import FORKED_SHARED
from readtrace.workloads import make_checkpoint


def labels(found):
    return [c.label for c in found]


def test_offered_where_forked_workers_shared_the_parents_file():
    found, notes = candidates({FORKED_SHARED}, keeps_cache=False)  # rclone: drops the cache on open
    fork = next(c for c in found if c.strategy == OWN_FD_PER_FORK)
    assert fork.label == "readtrace own fd per forked worker"
    assert fork.change.startswith("open the checkpoint in each worker, after the fork, not before")
    assert "readtrace prefetch" not in labels(found) and NO_FORKED_SHARING not in notes
    found, _ = candidates({FORKED_SHARED}, keeps_cache=True)  # the lab mount: the prefetch is tried too
    assert {"readtrace own fd per forked worker", "readtrace prefetch"} <= set(labels(found))


def test_not_offered_without_forked_sharing():
    for seen in ({"load_file"}, {"pattern:mmap-threads"}, {"torch.load", "import:torch"}):
        found, notes = candidates(seen, keeps_cache=True)
        assert all(c.strategy != OWN_FD_PER_FORK for c in found), seen
    _, notes = candidates({"pattern:mmap-threads"}, keeps_cache=True)
    assert NO_FORKED_SHARING in notes


def test_discovery_finds_the_file_a_raw_pread_fork_pool_shares(tmp_path):
    path = make_checkpoint(tmp_path, 4)[0]
    digests = tmp_path / "digests.jsonl"
    cmd = LOADERS["fork_pool"].command(tmp_path, digests)
    result = compare(cmd, strategy=OWN_FD_PER_FORK, workdir=tmp_path / "work")  # no files given
    assert result.files == [str(path)]
    fixed = [c for c in result.side("fixed")[0].manifest.calls if c.call == FORKED_SHARED]
    base = [c for c in result.side("baseline")[0].manifest.calls if c.call == FORKED_SHARED]
    assert len({c.pid for c in fixed}) == 4 and all(c.reopened for c in fixed)
    assert len({c.pid for c in base}) == 4 and not any(c.reopened for c in base)
    runs = [json.loads(line) for line in digests.read_text().splitlines()]
    assert len(runs) == 3 and len({(r["tensors"], r["digest"]) for r in runs}) == 1  # discovery, baseline, fixed
