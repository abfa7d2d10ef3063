"""Which Python loader call issued the reads: the python_calls view joined with the reads and faults.

A read or page fault of thread T at time t is attributed to the innermost recorded call of T whose
span holds t (schema.PYTHON_CALLS: ts_ns <= t <= end_ns, same clock). One outside every call of its
own thread goes to the call of its process open at t that started last: torch copies a mapped tensor
with its intra-op threads, which fault the pages while the loader's thread waits in get_tensor
(``by_process_bytes`` counts these). One outside every call is then given to the last call of its
thread (else process) that named the file (or its directory) and had returned: the lazy tensors of
a mapping (safetensors' get_tensor, torch.load(mmap=True)) are read when they are first used, after
the call (``after_return_bytes``, and per chain). Bytes are those of the data
files (analyze/views/roles.py) the load touched: bytes returned by read syscalls plus bytes of file pages
mapped by page faults (pages ops ``fault`` and ``map_pages``, counted as often as they were mapped).
The summary names the outermost entry point (the user's own call) whose chains read the most bytes,
with all of its chains (a transformers load reads through from_pretrained, load_state_dict and
safe_open, and through its loading pool's threads), their bytes and threads, and the levers of
those entry points that the installed library accepts (recorded by the child: inject/calls.py),
e.g. ``disable_mmap=True`` where from_pretrained takes it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.views.accesses import SOURCE_READ, Accesses
from readtrace.analyze.views.cachemisses import MMAP_OPS
from readtrace.analyze.views.grouping import dense_codes

SEP = " -> "  # inject/calls.py SEP
TOP_CHAINS = 5


def innermost_calls(calls: pd.DataFrame, key: str, keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per access (``keys`` value of column ``key``: tid or pid, ts): the row of ``calls`` it happened
    in (the innermost; across threads of a process: the last started), -1 for none."""
    owner = np.full(len(ts), -1, dtype=np.int64)
    if not len(calls) or not len(ts):
        return owner
    for t, group in calls.groupby(key, sort=False):
        hit = np.flatnonzero(keys == t)
        if not len(hit):
            continue
        times, owners = _timeline(group)
        pos = np.searchsorted(times, ts[hit], side="right") - 1
        inside = pos >= 0
        owner[hit[inside]] = owners[pos[inside]]
    return owner


def _timeline(group: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """A thread's calls as a step function: from times[i] on, the innermost open call is owners[i]
    (-1: none). Calls of one thread nest (a stack); an end closes the call wherever it is."""
    group = group[group["end_ns"] >= group["ts_ns"]]  # a corrupt row (ends before it starts) holds nothing
    rows = group.index.to_numpy()
    starts = group["ts_ns"].to_numpy(np.int64)
    ends = np.minimum(group["end_ns"].to_numpy(np.int64), np.iinfo(np.int64).max - 1)
    # ends sort after starts at the same ns (a read at a call's last ns is inside it)
    events = sorted([(int(s), 0, -int(e), int(r)) for s, e, r in zip(starts, ends, rows, strict=True)]
                    + [(int(e) + 1, 1, 0, int(r)) for e, r in zip(ends, rows, strict=True)])
    stack: list[int] = []
    times, owners = [], []
    for time, kind, _, row in events:
        if kind == 0:
            stack.append(row)
        elif row in stack:
            stack.remove(row)
        times.append(time)
        owners.append(stack[-1] if stack else -1)
    return np.asarray(times, dtype=np.int64), np.asarray(owners, dtype=np.int64)


def _touches(app: Accesses, pages: pd.DataFrame, data_ids: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pid, tid, ts, bytes, file) of every read syscall and mapping fault of a data file."""
    reads = (app.source == SOURCE_READ) & np.isin(app.file, data_ids) & (app.nbytes > 0)
    mapped = pages[pages["op"].isin(MMAP_OPS).to_numpy() & np.isin(pages["file"].to_numpy(), data_ids)]
    if mapped.empty:  # reads only: the accesses' own columns, views where every access counts (10 M reads: 0.3 GB)
        every = bool(reads.all())
        return tuple(column if every else column[reads] for column in (app.pid, app.tid, app.ts, app.nbytes, app.file))
    return (np.concatenate([app.pid[reads].astype(np.int64), mapped["pid"].to_numpy(np.int64)]),
            np.concatenate([app.tid[reads].astype(np.int64), mapped["tid"].to_numpy(np.int64)]),
            np.concatenate([app.ts[reads], mapped["ts_ns"].to_numpy(np.int64)]),
            np.concatenate([app.nbytes[reads], mapped["size"].to_numpy(np.int64)]),
            np.concatenate([app.file[reads], mapped["file"].to_numpy(np.int64)]))


def _call_files(calls: pd.DataFrame, files: pd.DataFrame) -> pd.DataFrame:
    """(row of calls, file id) for each file a call named: its path, or a file under its directory."""
    paths = files["path"].astype(object).where(files["path"].notna(), "").astype(str)
    pairs = []
    for row, path in calls["path"].items():
        if not isinstance(path, str) or not path:
            continue
        path = path.rstrip("/")
        hit = paths.index[(paths == path).to_numpy() | paths.str.startswith(path + "/").to_numpy()]
        pairs += [(row, int(f)) for f in hit]
    return pd.DataFrame(pairs, columns=["row", "file"], dtype=np.int64)


def after_return(calls: pd.DataFrame, files: pd.DataFrame, key: str, keys: np.ndarray, file: np.ndarray,
                 ts: np.ndarray) -> np.ndarray:
    """Per access: the call of the same ``key`` (tid or pid) that named its file and returned last
    before it, -1 for none."""
    owner = np.full(len(ts), -1, dtype=np.int64)
    pairs = _call_files(calls, files)
    if not len(pairs) or not len(ts):
        return owner
    pairs["key"] = calls[key].to_numpy()[pairs["row"]]
    pairs["end"] = calls["end_ns"].to_numpy()[pairs["row"]]
    for (k, f), group in pairs.groupby(["key", "file"], sort=False):
        hit = np.flatnonzero((keys == k) & (file == f))
        if not len(hit):
            continue
        group = group.sort_values("end", kind="stable")
        pos = np.searchsorted(group["end"].to_numpy(), ts[hit], side="left") - 1
        ok = pos >= 0
        owner[hit[ok]] = group["row"].to_numpy()[pos[ok]]
    return owner


def reads_from(calls: pd.DataFrame, app: Accesses, pages: pd.DataFrame, files: pd.DataFrame, meta: dict
               ) -> dict | None:
    """``Summary.reads_from``: the entry point whose chains issued most data-file bytes, or None
    without the view.
    ``pages``: the page rows with a file id (pagecache.page_rows)."""
    info = meta.get("python_calls")
    if not isinstance(info, dict):
        return None  # not recorded (--no-python-calls, an older trace, another backend's import)
    data_ids = files.index[files["role"] == "data"].to_numpy() if len(files) else np.empty(0, np.int64)
    pid, tid, ts, nbytes, file = _touches(app, pages, data_ids)
    data_bytes = int(nbytes.sum())
    calls = calls.reset_index(drop=True)
    owner = innermost_calls(calls, "tid", tid, ts)
    other = np.flatnonzero(owner < 0)
    owner[other] = innermost_calls(calls, "pid", pid[other], ts[other])
    inside = owner >= 0
    for key, keys in (("tid", tid), ("pid", pid)):
        late = np.flatnonzero(owner < 0)
        owner[late] = after_return(calls, files, key, keys[late], file[late], ts[late])
    got = owner >= 0
    after = got & ~inside
    out = {"calls": len(calls), "data_bytes": data_bytes, "attributed_bytes": int(nbytes[got].sum()),
           "by_process_bytes": int(nbytes[other][inside[other]].sum()),
           "after_return_bytes": int(nbytes[after].sum()),
           "attributed_fraction": float(nbytes[got].sum() / data_bytes) if data_bytes else None,
           "file_levers": {}, "entry": None, "entry_chains": [], "chain": None, "call": None, "bytes": 0,
           "chain_after_return_bytes": 0, "fraction": None, "threads": 0, "chains": [], "entries": [],
           "levers": [], "entry_points": sorted((info.get("entry_points") or {}).keys()),
           "wrap_failed": len(info.get("wrap_failed") or []), "record_failures": int(info.get("record_failures") or 0)}
    if not got.any():
        return out
    # Chains and entries are numbered once per call: the per-access rows carry ints, no strings
    # (a string per access cost ~4 us each: 40 s for a 10 M-read trace, benchmarks/bench_report.py).
    chain_of_call, chain_names = pd.factorize(calls["chain"].astype(object).fillna("").to_numpy())
    entry_of_chain, entry_names = pd.factorize(np.array([c.split(SEP, 1)[0] for c in chain_names], dtype=object))
    sel = slice(None) if got.all() else got  # views where every access is attributed
    chain = chain_of_call[owner[sel]].astype(np.int32)
    per = _per_touch(chain, entry_of_chain, tid[sel], nbytes[sel], after[sel], file[sel])
    by_chain = per.groupby("chain", sort=False).agg(bytes=("bytes", "sum"), after=("after", "sum"),
                                                    threads=("tid", "nunique"))
    by_chain = by_chain.sort_values("bytes", ascending=False, kind="stable")
    by_chain.index = chain_names[by_chain.index.to_numpy()]
    out["chains"] = [{"chain": chain, "entry": chain.split(SEP, 1)[0], "bytes": int(r["bytes"]),
                      "after_return_bytes": int(r["after"]), "threads": int(r["threads"]),
                      "fraction": float(r["bytes"] / data_bytes)}
                     for chain, r in by_chain.head(TOP_CHAINS).iterrows()]
    # the headline: the outermost entry point (the user's own call) whose chains read most, all of them
    by_entry = per.groupby("entry", sort=False).agg(bytes=("bytes", "sum"), after=("after", "sum"),
                                                    threads=("tid", "nunique"))
    by_entry = by_entry.sort_values("bytes", ascending=False, kind="stable")
    by_entry.index = entry_names[by_entry.index.to_numpy()]
    out["entries"] = [{"entry": entry, "bytes": int(r["bytes"]), "after_return_bytes": int(r["after"]),
                       "threads": int(r["threads"]), "fraction": float(r["bytes"] / data_bytes),
                       "chains": [c for c in by_chain.index if c.split(SEP, 1)[0] == entry]}
                      for entry, r in by_entry.head(TOP_CHAINS).iterrows()]
    top = out["entries"][0]
    chain = top["chains"][0]  # its chain that read most
    out.update(entry=top["entry"], entry_chains=top["chains"], chain=chain, call=chain.rsplit(SEP, 1)[-1],
               bytes=top["bytes"], chain_after_return_bytes=top["after_return_bytes"], fraction=top["fraction"],
               threads=top["threads"], levers=levers(chain, info.get("entry_points") or {}))
    # per data file: the levers of the chain that read most of it (findings name them)
    per_file = per.groupby(["file", "chain"], sort=False)["bytes"].sum().reset_index()
    per_file = per_file.sort_values("bytes", ascending=False, kind="stable").drop_duplicates("file")
    out["file_levers"] = {str(files.at[f, "path"]): found for f, chain in zip(per_file["file"],
                                                                          chain_names[per_file["chain"]], strict=True)
                          if (found := levers(chain, info.get("entry_points") or {}))}
    return out


def _per_touch(chain: np.ndarray, entry_of_chain: np.ndarray, tid: np.ndarray, nbytes: np.ndarray,
               after: np.ndarray, file: np.ndarray) -> pd.DataFrame:
    """The attributed touches (chain, entry, tid, bytes, after-return bytes, file) folded into one
    row per distinct (chain, tid, file, after return), in order of first appearance: every sum and
    distinct count per chain, entry or file (and pandas' first-appearance group order) is that of
    the touches, from a table of a few rows instead of one per access (10 M reads: 1.7 s of groupby)."""
    codes, n = dense_codes(chain, tid, file, after)
    if n * 4 > len(codes) or int(nbytes.sum()) >= 2**53:  # nothing to fold (or float sums not exact)
        return pd.DataFrame({"chain": chain, "entry": entry_of_chain[chain].astype(np.int32), "tid": tid,
                             "bytes": nbytes, "after": np.where(after, nbytes, 0), "file": file}, copy=False)
    first = np.zeros(n, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # the first touch of each distinct tuple
    total = np.bincount(codes, weights=nbytes, minlength=n).astype(np.int64)
    order = np.argsort(first, kind="stable")
    rows, total = first[order], total[order]
    return pd.DataFrame({"chain": chain[rows], "entry": entry_of_chain[chain[rows]].astype(np.int32),
                         "tid": tid[rows], "bytes": total, "after": np.where(after[rows], total, 0),
                         "file": file[rows]})


# lever keyword -> (the change, whether it applies given what the calls already passed)
_CHANGES = {
    "disable_mmap": ("{call}(..., disable_mmap=True)", lambda used: used.get("disable_mmap") is not True),
    "backend": ('{call}(path, backend="pread")', lambda used: used.get("backend") != "pread"),
    "mmap": ("{call}(path, mmap=False)", lambda used: used.get("mmap") is True),
}


def levers(chain: str, entries: dict) -> list[dict]:
    """The levers of the outermost entry point of the chain that has any (the user's own call:
    diffusers' from_pretrained, not the load_file it calls inside) that the installed version
    accepts, as the child recorded them; ``backend="pread"`` only where the library documents it."""
    out = []
    backends = {v for e in entries.values() for v in (e.get("values") or {}).get("backend", [])}
    for call in dict.fromkeys(c if c in entries else c.rsplit(".", 1)[0] for c in chain.split(SEP)):
        entry = entries.get(call)  # get_tensor's lever is its safe_open's
        if not entry:
            continue
        for keyword in entry.get("accepts", []):
            change, applies = _CHANGES.get(keyword, (None, None))
            if change is None or not applies(entry.get("used") or {}):
                continue
            if keyword == "backend" and "pread" not in backends:
                continue
            out.append({"call": call, "keyword": keyword, "change": change.format(call=call),
                        "library": entry.get("library"), "version": entry.get("version")})
        if out:
            return out
    return out
