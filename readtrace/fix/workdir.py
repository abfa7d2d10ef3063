"""The directory a ``fix --compare`` keeps its runs' files in (manifests, logs, traces, rank plan).

It is always one this run made: a temporary one (removed after), or with ``--keep DIR`` DIR itself
when it is new or empty, else a new ``DIR/run-N`` (an earlier run's manifests are never appended to).
DIR must be the invoking user's (the sudo user's under sudo) and writable by no one else. Under sudo
the directory is handed to the invoking user: the command runs as them and writes its manifest there,
and the recorder writes traces with their rights; readtrace's own files there are created new and
never through a symlink (``replace.new_file``), read back without following one (``replace.no_follow``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from readtrace import runstate
from readtrace.errors import UsageError
from readtrace.escape import printable
from readtrace.owners import user_name, writable_by_others
from readtrace.record.launch import Credentials


@contextmanager
def work_dir(keep: str | os.PathLike | None, creds: Credentials | None,
             say: Callable[[str], None] = lambda line: None) -> Iterator[Path]:
    """A fresh directory for one comparison: in ``keep`` (kept) or temporary (removed)."""
    if keep is not None:
        path = checked_keep(keep, creds)
        work = _fresh_in(path, creds)
        if work != path:
            say(f"{printable(keep)} holds an earlier run: this one is kept in {printable(work)}")
        yield work
        return
    with tempfile.TemporaryDirectory(prefix=f"{runstate.PREFIX}fix-", ignore_cleanup_errors=True) as tmp, runstate.noted("fix", tmp):
        _hand_over(Path(tmp), creds)
        yield Path(tmp)


def checked_keep(keep: str | os.PathLike, creds: Credentials | None) -> Path:
    """``keep``, made if missing (for the invoking user), resolved once; refused when someone else
    owns it or group or others can write it."""
    path = Path(keep)
    try:
        path.mkdir(mode=0o755, parents=True)
        _hand_over(path, creds)
    except FileExistsError:
        pass
    except OSError as e:
        raise UsageError(f"{{option}} {printable(keep)}: cannot make it: {e.strerror}", option="keep") from None
    path = Path(os.path.realpath(path))
    st = os.stat(path)
    me = creds.uid if creds else os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{{option}} {printable(keep)}: exists and is not a directory", option="keep")
    if st.st_uid != me:
        raise UsageError(f"{{option}} {printable(keep)}: owned by {user_name(st.st_uid)}, not by {user_name(me)}: "
                         "refused (another user could plant links in it); give a directory of yours", option="keep")
    if writable_by_others(st):
        raise UsageError(f"{{option}} {printable(keep)}: writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}): refused; chmod go-w it or give another", option="keep")
    return path


def _fresh_in(keep: Path, creds: Credentials | None) -> Path:
    """``keep`` when empty, else the first ``keep/run-N`` that did not exist (made now)."""
    if not any(keep.iterdir()):
        return keep
    for n in range(2, 100_000):
        work = keep / f"run-{n}"
        try:
            work.mkdir(mode=0o755)
        except FileExistsError:
            continue
        _hand_over(work, creds)
        return work
    raise UsageError(f"{{option}} {printable(keep)}: no free run-N name left", option="keep")


def _hand_over(path: Path, creds: Credentials | None) -> None:
    """Under sudo: the invoking user owns the directory (their command writes its manifests there)."""
    if creds is not None:
        os.chown(path, creds.uid, creds.gid)
