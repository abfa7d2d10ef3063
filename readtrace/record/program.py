"""Assemble the BPF program from probes/*.bpf.c (package data readtrace.probes), substitute its
UPPERCASE tokens, compile and attach.

Kernel struct offsets come from BTF (btf.py), never from the installed headers, which may describe
another kernel build.
"""

from __future__ import annotations

import re

from readtrace.record.btf import BTFError, kernel_btf
from readtrace.record.probefiles import kind_numbers, probe_text
from readtrace.record.records import layout_asserts
from readtrace.trace.schema import FUSE_READ, RUN_SPAN_NS

# The programs that attach: each file #includes what it uses (fuse.bpf.c under #if WITH_FUSE).
ENTRY_SOURCES = ("syscalls.bpf.c", "proc.bpf.c", "sched.bpf.c")
SOURCES = ("common.bpf.c", "app.bpf.c", "sched.bpf.c", "pages.bpf.c", "proc.bpf.c", "syscalls.bpf.c")  # always compiled
FUSE_SOURCE = "fuse.bpf.c"  # the FUSE view, with FUSE mounts only
_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)".*$', re.M)

EVENTS_RING_BYTES = 64 << 20
STRS_RING_BYTES = 8 << 20  # the least strs ring; it grows with the events ring (strs_ring_bytes)
PAGE_SIZE = 4096

# token -> (struct, member): offsets read from the running kernel's BTF.
BTF_TOKENS = {
    "TASK_FILES": ("task_struct", "files"),
    "TASK_EXIT_CODE": ("task_struct", "exit_code"),
    "FILES_FDT": ("files_struct", "fdt"),
    "FILES_FDTAB": ("files_struct", "fdtab"),
    "FILES_FD_ARRAY": ("files_struct", "fd_array"),
    "FILE_F_POS": ("file", "f_pos"),
    "FILE_F_INODE": ("file", "f_inode"),
    "FILE_PRIVATE_DATA": ("file", "private_data"),
    "INODE_I_INO": ("inode", "i_ino"),
    "INODE_I_SB": ("inode", "i_sb"),
    "INODE_I_SIZE": ("inode", "i_size"),
    "INODE_I_RDEV": ("inode", "i_rdev"),
    "SUPER_BLOCK_S_DEV": ("super_block", "s_dev"),
    "ADDRESS_SPACE_HOST": ("address_space", "host"),
    "PT_REGS_ORIG_AX": ("pt_regs", "orig_ax"),
    "PT_REGS_DI": ("pt_regs", "di"),
    "PT_REGS_SI": ("pt_regs", "si"),
    "PT_REGS_R10": ("pt_regs", "r10"),
    "FUSE_DEV_FC": ("fuse_dev", "fc"),
    "FUSE_CONN_DEV": ("fuse_conn", "dev"),
    "TASK_PID": ("task_struct", "pid"),
    "TASK_COMM": ("task_struct", "comm"),
    "TASK_THREAD_PID": ("task_struct", "thread_pid"),
    "PID_LEVEL": ("pid", "level"),
    "PID_NUMBERS": ("pid", "numbers"),
}
FUSE_TOKENS = ("INODE_I_RDEV", "PT_REGS_ORIG_AX", "FUSE_DEV_FC", "FUSE_CONN_DEV")
# record --cgroup only (proc.bpf.c, WITH_CGROUP): which cgroup a task moved into, and the task's ids.
CGROUP_TOKENS = {
    "CGROUP_LEVEL": ("cgroup", "level"),
    "CGROUP_ANCESTORS": ("cgroup", "ancestors"),
    "CGROUP_KN": ("cgroup", "kn"),
    "CGROUP_ROOT": ("cgroup", "root"),
    "CGROUP_ROOT_HIERARCHY_ID": ("cgroup_root", "hierarchy_id"),
    "KERNFS_NODE_ID": ("kernfs_node", "id"),
    "TASK_TGID": ("task_struct", "tgid"),
}
SYSCALL_ARG_REGS = ("di", "si", "dx", "r10", "r8", "r9")  # x86_64 syscall ABI, argument 1..6
SYSCALL_NUMBERS = {  # x86_64
    "NR_READ": 0, "NR_OPEN": 2, "NR_CLOSE": 3, "NR_LSEEK": 8, "NR_MMAP": 9, "NR_MUNMAP": 11,
    "NR_PREAD64": 17, "NR_READV": 19, "NR_DUP": 32, "NR_DUP2": 33, "NR_FCNTL": 72, "NR_READAHEAD": 187,
    "NR_FADVISE64": 221, "NR_OPENAT": 257, "NR_DUP3": 292, "NR_PREADV": 295, "NR_PREADV2": 327,
    "NR_CLOSE_RANGE": 436, "NR_OPENAT2": 437,
}

CONSTANTS = {
    "PID_LIMIT": 4 * 1024 * 1024,  # PID_MAX_LIMIT on 64-bit: every pid indexes the per-pid arrays
    "SLOTS": 16384,  # per-thread state slots (tid % SLOTS), a power of two
    "RUN_SPAN_NS": RUN_SPAN_NS,  # trace/schema.py: a merged read / page run spans at most this
    "NR_OPEN_DEFAULT": 64,  # length of files_struct.fd_array (BITS_PER_LONG)
    "IOV_MAX_SUMMED": 8,
    "MAP_ANONYMOUS_FLAG": 0x20,
    "CLONE_THREAD_FLAG": 0x10000,
    "F_DUPFD_CMD": 0,
    "F_DUPFD_CLOEXEC_CMD": 1030,
    "SYS_READ_NR": 0,  # x86_64
    "FUSE_READ_OPCODE": FUSE_READ,
    "DEV_FUSE_RDEV": (10 << 20) | 229,  # /dev/fuse is char 10:229, kernel dev_t encoding
    "CGROUP_MAX_DEPTH": 32,  # record --cgroup: ancestors of a cgroup searched for the recorded one
}


def merged_page_kinds() -> int:
    """How many page kinds keep a merged run per thread (pages.bpf.c): RT_FAULT .. RT_MISS."""
    kinds = kind_numbers()
    return kinds["MISS"] - kinds["FAULT"] + 1


# Layouts the probes rely on without a token: fd_to_file reads struct fdtable's head in one go;
# inner_id reads struct pid's numbers[level] as struct upid {int nr; struct pid_namespace *ns;}: 16 bytes.
FIXED_LAYOUT = {("fdtable", "max_fds"): 0, ("fdtable", "fd"): 8, ("upid", "nr"): 0, ("upid", "ns"): 8}


def kernel_offsets(with_fuse: bool, with_cgroup: bool = False) -> dict[str, int]:
    btf = kernel_btf()
    for (struct, member), expected in FIXED_LAYOUT.items():
        if btf.offset(struct, member) != expected:
            raise BTFError(f"{struct}.{member} at {btf.offset(struct, member)}, probes expect {expected}")
    tokens = {t: sm for t, sm in BTF_TOKENS.items() if with_fuse or t not in FUSE_TOKENS}
    if with_cgroup:
        tokens.update(CGROUP_TOKENS)
    offsets = {token: btf.offset(struct, member) for token, (struct, member) in tokens.items()}
    return {**offsets, **syscall_arg_slots(btf)}


def syscall_arg_slots(btf) -> dict[str, int]:
    """SYSARGn_SLOT: index of argument n in the 8 words of pt_regs read from r10 (syscalls.bpf.c)."""
    base = btf.offset("pt_regs", "r10")
    slots = {}
    for n, reg in enumerate(SYSCALL_ARG_REGS, start=1):
        delta = btf.offset("pt_regs", reg) - base
        if delta % 8 or not 0 <= delta < 64:
            raise BTFError(f"pt_regs.{reg} outside the 64 bytes after r10: unexpected layout")
        slots[f"SYSARG{n}_SLOT"] = delta // 8
    return slots


def substitute(text: str, tokens: dict[str, int]) -> str:
    """Replace whole-word UPPERCASE tokens with their values (bcc filetop style)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, tokens)) + r")\b")
    return pattern.sub(lambda m: str(tokens[m.group(1)]), text)


def expand_includes(name: str, seen: set[str]) -> str:
    """``name`` with its ``#include "file"`` lines replaced by those probe files, each file once: bcc
    compiles one text, and the result is what ``record --ebpf`` prints."""
    if name in seen:
        return f"/* {name}: included above */"
    seen.add(name)
    return _LOCAL_INCLUDE.sub(lambda m: expand_includes(m.group(1), seen), probe_text(name))


def strs_ring_bytes(ring_bytes: int) -> int:
    """The strs ring (opens with their paths) for an events ring of ``ring_bytes``: twice as large. An
    open storm of small files (open, read, close each) puts one 352-byte record in the strs ring per two
    96-byte records in the events ring, so both now fill at about the same time; the old fixed 8 MiB
    ring lost 29 % of 270k names in a 1 s stall of the recorder, this one none in 3 s (2 vCPUs)."""
    return max(STRS_RING_BYTES, 2 * ring_bytes)


def build_source(*, with_fuse: bool, coalesce: bool = True, ring_bytes: int = EVENTS_RING_BYTES,
                 cgroup: int | None = None) -> str:
    """The final C text of the probes, as compiled (BTFError when the kernel lacks a struct).
    ``cgroup``: the id (inode number) of a cgroup v2 directory whose joining processes are traced."""
    seen: set[str] = set()
    parts = [expand_includes(name, seen) for name in ENTRY_SOURCES] + [layout_asserts()]
    if ring_bytes < PAGE_SIZE or ring_bytes & (ring_bytes - 1):
        raise ValueError("the events ring size must be a power of two of at least one page")
    tokens = {**CONSTANTS, **SYSCALL_NUMBERS, **kernel_offsets(with_fuse, cgroup is not None), "COALESCE": int(coalesce),
              "WITH_CGROUP": int(cgroup is not None), "CGROUP_WANTED_ID": cgroup or 0,
              "WITH_FUSE": int(with_fuse), "EVENTS_RING_PAGES": ring_bytes // PAGE_SIZE,
              "MERGED_PAGE_KINDS": merged_page_kinds(), "STRS_RING_PAGES": strs_ring_bytes(ring_bytes) // PAGE_SIZE}
    header = "/* readtrace probes, generated: offsets from /sys/kernel/btf/vmlinux */\n"
    return header + substitute("\n".join(parts), tokens)


def fuse_supported() -> bool:
    """The kernel BTF describes the FUSE structs (FUSE built in, or its module BTF loaded)."""
    try:
        btf = kernel_btf()
    except BTFError:
        return False
    return btf.has_struct("fuse_dev") and btf.has_struct("fuse_conn")


def compile_program(source: str):
    """Compile + load + attach (bcc attaches TRACEPOINT_PROBE/RAW_TRACEPOINT_PROBE itself).

    Raises PrerequisiteError with one line when bcc cannot compile, load or attach.
    """
    from readtrace.errors import PrerequisiteError
    from readtrace.record.bccload import load_bcc

    try:
        bcc = load_bcc()
        return bcc.BPF(text=source.encode(), cflags=["-Wno-unused-function", "-Wno-macro-redefined"])
    except Exception as e:  # BccImportError, and bcc raises bare Exception for compile/load/attach
        raise PrerequisiteError(f"cannot load the probes: {e} (check: readtrace doctor; "
                             "the C is printed by: readtrace record --ebpf)") from e





def _detach_tracepoints(bpf) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(bpf.detach_tracepoint, list(bpf.tracepoint_fds)))


def detach_in_background(bpf):
    """Start detaching the tracepoints; returns the thread to pass to ``detach``.

    Each detach waits for an RCU grace period (one per attach point: ~2-4 s on this VM), so it runs while the
    spool is decoded instead of after it. The maps stay usable until ``detach``.
    """
    import threading

    thread = threading.Thread(target=_detach_tracepoints, args=(bpf,), name="readtrace-detach", daemon=True)
    thread.start()
    return thread


def detach(bpf, background=None) -> None:
    """Detach every probe and free the program (after a ``detach_in_background`` thread, if any)."""
    if background is not None:
        background.join()
    _detach_tracepoints(bpf)
    bpf.cleanup()
