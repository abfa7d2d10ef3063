"""Run a command with readtrace's hook set attached and doing (almost) nothing: the floor of what any
recorder on these hooks costs, before it records a byte.

  sudo .venv/bin/python benchmarks/hooks_floor.py {empty,filter,per_syscall} -- CMD [ARG ...]

The hooks are every tracepoint and raw tracepoint readtrace's probes attach (read from the probe
sources, so the set follows them). ``empty``: each handler returns at once. ``filter``: each handler
does readtrace's first test (is the current tgid traced? one lookup in a per-pid array) and returns;
CMD's process is the traced one. ``per_syscall``: as ``filter``, with the raw ``sys_enter``/``sys_exit``
pair replaced by the per-syscall tracepoints (``syscalls:sys_enter_X``/``sys_exit_X``, bpftrace's kind) of
the syscalls readtrace records: the floor of a recorder whose unrelated syscalls fire no program.
The exit status is CMD's. Used by bench_record.py's hooks_* modes.
"""

from __future__ import annotations

import subprocess
import sys

from readtrace.record.prereq import probe_tracepoints
from readtrace.record.program import (
    CONSTANTS,
    FUSE_SOURCE,
    SOURCES,
    SYSCALL_NUMBERS,
    compile_program,
    detach,
    fuse_supported,
)

GATES = {
    "empty": "static __always_inline int gate(void) { return 0; }\n",
    "filter": ("BPF_ARRAY(tgids, u8, PID_LIMIT);\n"
               "static __always_inline int gate(void)\n{\n"
               "    u32 tgid = bpf_get_current_pid_tgid() >> 32;\n"
               "    u8 *on = tgids.lookup(&tgid);\n"
               "    return on ? *on : 0;\n}\n"),
}
GATES["per_syscall"] = GATES["filter"]
RAW_SYSCALL_PAIR = {("raw", "sys_enter"), ("raw", "sys_exit")}


def per_syscall_tracepoints() -> list[tuple[str, str]]:
    """syscalls:sys_enter_X and sys_exit_X of every syscall readtrace records (record/program.py)."""
    names = [nr.removeprefix("NR_").lower() for nr in SYSCALL_NUMBERS]
    return [("syscalls", f"sys_{side}_{name}") for name in names for side in ("enter", "exit")]


def hook_source(kind: str) -> str:
    """One handler per hook readtrace attaches, each only calling ``gate``."""
    names = SOURCES + ((FUSE_SOURCE,) if fuse_supported() else ())
    handlers = []
    hooks = probe_tracepoints(names)
    if kind == "per_syscall":
        hooks = [h for h in hooks if h not in RAW_SYSCALL_PAIR] + per_syscall_tracepoints()
    for category, name in dict.fromkeys(hooks):
        if category == "raw":
            handlers.append(f"RAW_TRACEPOINT_PROBE({name}) {{ return gate(); }}")
        else:
            handlers.append(f"TRACEPOINT_PROBE({category}, {name}) {{ return gate(); }}")
    header = "typedef int rwf_t;\n" + f"#include <uapi/linux/fuse.h>\n#define PID_LIMIT {CONSTANTS['PID_LIMIT']}\n"  # the fuse tracepoints' enum
    return header + GATES[kind] + "\n".join(handlers) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in GATES or argv[1] != "--":
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    kind, cmd = argv[0], argv[2:]
    # The command waits on its stdin until its pid is in the traced array and the hooks are attached.
    child = subprocess.Popen(["/bin/sh", "-c", 'read _ ; exec "$@"', "sh", *cmd], stdin=subprocess.PIPE)
    bpf = None
    try:
        bpf = compile_program(hook_source(kind))
        if kind != "empty":
            table = bpf["tgids"]
            table[table.Key(child.pid)] = table.Leaf(1)
        child.stdin.write(b"\n")
        child.stdin.close()
        return child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if bpf is not None:
            detach(bpf)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
