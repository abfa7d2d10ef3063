"""Assemble the BPF program from probes/*.bpf.c, substitute its UPPERCASE tokens, compile and attach.

Kernel struct offsets come from BTF (btf.py), never from the installed headers, which may describe
another kernel build.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from readtrace.record.btf import BTFError, kernel_btf

PROBES_DIR = Path(__file__).resolve().parents[2] / "probes"
HEADER = "readtrace.h"
# Concatenation order matters: later files call helpers of earlier ones.
SOURCES = ("common.bpf.c", "app.bpf.c", "pages.bpf.c", "proc.bpf.c")
FUSE_SOURCE = "fuse.bpf.c"

EVENTS_RING_BYTES = 64 << 20
STRS_RING_BYTES = 8 << 20
PAGE_SIZE = 4096

# token -> (struct, member): offsets read from the running kernel's BTF.
BTF_TOKENS = {
    "TASK_FILES": ("task_struct", "files"),
    "TASK_EXIT_CODE": ("task_struct", "exit_code"),
    "FILES_FDT": ("files_struct", "fdt"),
    "FDTABLE_FD": ("fdtable", "fd"),
    "FDTABLE_MAX_FDS": ("fdtable", "max_fds"),
    "FILE_F_POS": ("file", "f_pos"),
    "FILE_F_INODE": ("file", "f_inode"),
    "FILE_PRIVATE_DATA": ("file", "private_data"),
    "INODE_I_INO": ("inode", "i_ino"),
    "INODE_I_SB": ("inode", "i_sb"),
    "INODE_I_SIZE": ("inode", "i_size"),
    "INODE_I_RDEV": ("inode", "i_rdev"),
    "SUPER_BLOCK_S_DEV": ("super_block", "s_dev"),
    "PT_REGS_ORIG_AX": ("pt_regs", "orig_ax"),
    "PT_REGS_DI": ("pt_regs", "di"),
    "PT_REGS_SI": ("pt_regs", "si"),
    "FUSE_DEV_FC": ("fuse_dev", "fc"),
    "FUSE_CONN_DEV": ("fuse_conn", "dev"),
}
FUSE_TOKENS = ("INODE_I_RDEV", "PT_REGS_ORIG_AX", "PT_REGS_DI", "PT_REGS_SI", "FUSE_DEV_FC", "FUSE_CONN_DEV")

CONSTANTS = {
    "EVENTS_RING_PAGES": EVENTS_RING_BYTES // PAGE_SIZE,
    "STRS_RING_PAGES": STRS_RING_BYTES // PAGE_SIZE,
    "IOV_MAX_SUMMED": 8,
    "MAP_ANONYMOUS_FLAG": 0x20,
    "CLONE_THREAD_FLAG": 0x10000,
    "F_DUPFD_CMD": 0,
    "F_DUPFD_CLOEXEC_CMD": 1030,
    "SYS_READ_NR": 0,  # x86_64
    "FUSE_READ_OPCODE": 15,
    "DEV_FUSE_RDEV": (10 << 20) | 229,  # /dev/fuse is char 10:229, kernel dev_t encoding
}


def probe_text(name: str) -> str:
    return (PROBES_DIR / name).read_text()


def kind_numbers() -> dict[str, int]:
    """RT_* record kinds parsed from probes/readtrace.h (one definition for C and Python)."""
    body = re.search(r"enum rt_kind \{(.*?)\};", probe_text(HEADER), re.S).group(1)
    return {name: int(num) for name, num in re.findall(r"RT_(\w+)\s*=\s*(\d+)", body)}


def kernel_offsets(with_fuse: bool) -> dict[str, int]:
    btf = kernel_btf()
    tokens = {t: sm for t, sm in BTF_TOKENS.items() if with_fuse or t not in FUSE_TOKENS}
    return {token: btf.offset(struct, member) for token, (struct, member) in tokens.items()}


def substitute(text: str, tokens: dict[str, int]) -> str:
    """Replace whole-word UPPERCASE tokens with their values (bcc filetop style)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, tokens)) + r")\b")
    return pattern.sub(lambda m: str(tokens[m.group(1)]), text)


def build_source(*, with_fuse: bool, coalesce: bool = True) -> str:
    """The final C text of the probes, as compiled."""
    parts = [probe_text(HEADER), *(probe_text(s) for s in SOURCES)]
    if with_fuse:
        parts.append(probe_text(FUSE_SOURCE))
    tokens = {**CONSTANTS, **kernel_offsets(with_fuse), "COALESCE": int(coalesce)}
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
    """Compile + load + attach (bcc attaches TRACEPOINT_PROBE/RAW_TRACEPOINT_PROBE itself)."""
    from readtrace.record.bccload import load_bcc

    bcc = load_bcc()
    return bcc.BPF(text=source.encode(), cflags=["-Wno-unused-function", "-Wno-macro-redefined"])


__all__ = ["build_source", "compile_program", "fuse_supported", "kind_numbers", "resources"]
