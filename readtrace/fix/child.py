"""The user's command as ``readtrace fix`` runs it: checked first like a shell would (127 missing, 126
not runnable, a working directory that is gone said so), and never left behind.

A run without a terminal on its stdin gets a process group of its own: when readtrace is stopped
(Ctrl-C, SIGTERM, SIGHUP: ``stop_signals_interrupt``) the whole group is terminated, a shell's or a
launcher's children too. A run on a terminal stays in the terminal's group, where Ctrl-C reaches it
directly. Every run also gets PR_SET_PDEATHSIG (a SIGKILLed readtrace takes it down) and, under sudo,
the invoking user's uid, groups and HOME (``record.launch.child_setup``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping

from readtrace.errors import CommandNotExecutableError, CommandNotFoundError, InputError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # Ctrl-C (SIGINT) is already a KeyboardInterrupt
GRACE_S = 5.0  # from SIGTERM to SIGKILL when readtrace stops a run


def check_runnable(command: list[str], cwd: str | None, env: Mapping[str, str] | None = None) -> None:
    """Raise before anything runs: InputError when ``cwd`` is gone, CommandNotFoundError (127) or
    CommandNotExecutableError (126) as a shell would say them."""
    from readtrace.record.launch import resolve_command

    if cwd is not None and not os.path.isdir(cwd):
        raise InputError(f"cannot run {command[0]}: its working directory {cwd} no longer exists "
                         "(give the command with -- CMD from an existing directory)")
    name = command[0]
    if cwd is not None and os.sep in name and not os.path.isabs(name):
        name = os.path.join(cwd, name)  # the child resolves it after its chdir
    resolve_command([name, *command[1:]], dict(os.environ if env is None else env))


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop readtrace like Ctrl-C: a KeyboardInterrupt, so every run is stopped,
    every work directory removed, and the exit code is 130 (INTERRUPTED)."""

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run(command: list[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
        stdin=None, stdout=None, stderr=None, binds: Mapping[str, str] | None = None) -> int:
    """Run ``command`` to its end; its exit code (128+N when signal N killed it). Interrupted
    (KeyboardInterrupt), the run is stopped first, its process group with it, then it propagates.
    ``binds`` (file -> its local copy): the command sees each file as its copy (fix/localcopy.py)."""
    from readtrace.record.launch import child_setup, command_environment, sudo_credentials

    check_runnable(command, cwd, env)
    own_group = not _on_terminal(stdin)
    creds = sudo_credentials()  # under sudo the command runs as the invoking user, as `record` runs it
    setup = child_setup(creds, os.getpid())
    if binds:
        setup = _bound(binds, setup)
    try:
        proc = subprocess.Popen(command, env=command_environment(env, creds), cwd=cwd, stdin=stdin, stdout=stdout,
                                stderr=stderr, process_group=0 if own_group else None,
                                preexec_fn=setup)
    except OSError as e:  # checked, yet the exec failed (a bad format, a race): as a shell says it
        kind = CommandNotFoundError if e.errno == errno.ENOENT else CommandNotExecutableError
        raise kind(f"{command[0]}: cannot run: {e.strerror or e}") from None
    try:
        code = proc.wait()
    except BaseException:
        _stop(proc, own_group)
        raise
    return 128 - code if code < 0 else code


def _bound(binds: Mapping[str, str], then: Callable[[], None]) -> Callable[[], None]:
    """A preexec_fn: the files bound over by their copies (as root, before ``then`` drops root)."""
    from readtrace.fix.localcopy import bind_over

    def setup() -> None:
        bind_over(binds)
        then()
    return setup


def _on_terminal(stdin) -> bool:
    if stdin is not None:
        return False
    try:
        return os.isatty(0)
    except OSError:
        return False


def _stop(proc: subprocess.Popen, own_group: bool) -> None:
    """SIGTERM to the run (its group), SIGKILL after GRACE_S; reaped."""
    send = (lambda sig: _kill_group(proc.pid, sig)) if own_group else proc.send_signal
    send(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    send(signal.SIGKILL)
    proc.wait()


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
