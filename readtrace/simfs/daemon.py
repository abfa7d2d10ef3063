"""The daemon process: ``python -m readtrace.simfs.daemon CONFIG_JSON READY_FD``.

Always a process of its own, never the one that reads the mount (it would be traced as the same
tgid, and a reader blocked on its own daemon deadlocks). Writes "ready" to READY_FD once the kernel
sent FUSE_INIT; libfuse unmounts on SIGINT/SIGTERM/SIGHUP and on ``fusermount3 -u``.
"""

from __future__ import annotations

import os
import sys

from readtrace.simfs.config import SimConfig
from readtrace.simfs.fs import SimFS, ZeroCopyFUSE
from readtrace.simfs.log import RequestLog

EXIT_ON_SIGNAL = 8  # fuse_main's status after SIGINT/SIGTERM/SIGHUP: a clean unmount for us


def serve(config: SimConfig, ready_fd: int | None = None) -> None:
    """Mount and serve until unmounted (blocks)."""
    log = RequestLog(config.log)
    log.write("mount", pid=os.getpid(), **{k: v for k, v in vars(config).items() if k != "log"})

    def signal_ready() -> None:
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)

    # default_permissions: the kernel checks SRC's owners and modes (as getattr shows them) for everyone
    options = {"ro": True, "max_read": config.max_read_kib * 1024, "fsname": f"simfs:{config.src}",
               "subtype": f"simfs-{config.profile}", "default_permissions": True}
    if os.geteuid() == 0:  # other users may read through it, never more than they could read in SRC
        options["allow_other"] = True
    fs = SimFS(config, log, on_ready=signal_ready)
    try:
        ZeroCopyFUSE(fs, config.mountpoint, raw_fi=True, foreground=True, **options)
    except RuntimeError as e:
        if e.args != (EXIT_ON_SIGNAL,):
            raise
    finally:
        fs.backend.close()  # a shared link's last user removes its file
        log.close()


def main(argv: list[str]) -> int:
    config = SimConfig.from_json(argv[0])
    serve(config, int(argv[1]) if len(argv) > 1 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
