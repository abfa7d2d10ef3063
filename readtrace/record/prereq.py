"""The prerequisites of recording, checked one by one: shared by ``readtrace doctor`` and ``record``."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from readtrace.errors import PrerequisiteError
from readtrace.owners import INIT_USER_NS, user_namespace
from readtrace.record.probefiles import probe_text
from readtrace.record.program import FUSE_SOURCE, SOURCES

TRACEFS = Path("/sys/kernel/tracing")
CAP_PERFMON, CAP_BPF, CAP_SYS_ADMIN = 38, 39, 21


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # False: only the FUSE view needs it


def _cap_eff() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def check_privileges() -> Check:
    caps = _cap_eff()
    has = lambda bit: bool(caps >> bit & 1)  # noqa: E731
    ok = (has(CAP_BPF) and has(CAP_PERFMON)) or has(CAP_SYS_ADMIN)  # root without capabilities cannot
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    detail = who if ok else f"{who} without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN"
    if ok and user_namespace() != INIT_USER_NS:  # capabilities count for bpf() only in the host's namespace
        ok, detail = False, f"{who} of a user namespace ({user_namespace()}): its capabilities do not reach bpf()"
    return Check("root or CAP_BPF+CAP_PERFMON", ok, detail, "run it with sudo: sudo readtrace ...")


def check_bcc() -> Check:
    from readtrace.record.bccload import BccImportError, load_bcc

    try:
        bcc = load_bcc()
    except BccImportError as e:
        return Check("bcc (python3-bpfcc)", False, str(e), "apt-get install -y bpfcc-tools python3-bpfcc")
    return Check("bcc (python3-bpfcc)", True, f"bcc {getattr(bcc, '__version__', '?')}")


def _debian_headers() -> tuple[str, str] | None:
    arch = sorted(Path("/usr/src").glob("linux-headers-*-amd64"))
    if not arch:
        return None
    common = Path(str(arch[-1]).replace("-amd64", "-common"))
    return str(arch[-1]), str(common)


def check_headers() -> Check:
    release = platform.release()
    build = Path(f"/lib/modules/{release}/build")
    if (build / "include").is_dir() or (build / "Makefile").exists():
        return Check("kernel headers", True, str(build.resolve()))
    found = _debian_headers()
    if found is None:
        fix = "apt-get install -y linux-headers-amd64, then link them (make system)"
    else:
        fix = (f"ln -sfn {found[0]} /lib/modules/{release}/build && "
               f"ln -sfn {found[1]} /lib/modules/{release}/source")
    return Check("kernel headers", False, f"{build} missing", fix)


def _is_dir(path: Path) -> bool:
    """Like Path.is_dir, but False (not PermissionError) where a non-root user may not look."""
    try:
        return path.is_dir()
    except OSError:
        return False


def check_tracefs() -> Check:
    events = TRACEFS / "events"
    try:
        ok = events.is_dir()
    except PermissionError:
        return Check("tracefs", False, f"{events} not readable as uid {os.geteuid()} (root only)",
                     "run it with sudo: sudo readtrace ...")
    return Check("tracefs", ok, str(TRACEFS) if ok else f"{TRACEFS} not mounted",
                 "mount -t tracefs nodev /sys/kernel/tracing")


def check_arch() -> Check:
    machine = platform.machine()
    return Check("x86_64", machine == "x86_64", machine,
                 "the probes read syscall arguments with the x86_64 ABI; other architectures are not supported yet")


def check_btf() -> Check:
    from readtrace.record.btf import BTFError
    from readtrace.record.program import kernel_offsets

    try:
        kernel_offsets(with_fuse=False)
    except BTFError as e:
        return Check("kernel BTF", False, str(e), "a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    return Check("kernel BTF", True, "/sys/kernel/btf/vmlinux")


def probe_tracepoints(source_names) -> list[tuple[str, str]]:
    """(category, name) of every TRACEPOINT_PROBE in the given probe sources."""
    found = []
    for name in source_names:
        text = probe_text(name)
        found += re.findall(r"(?<!RAW_)TRACEPOINT_PROBE\((\w+),\s*(\w+)\)", text)
        found += [("raw", tp) for tp in re.findall(r"RAW_TRACEPOINT_PROBE\((\w+)\)", text)]
    return found


def check_tracepoints(source_names, required: bool) -> list[Check]:
    checks = []
    for category, name in probe_tracepoints(source_names):
        if category == "raw":  # a raw tracepoint: its event exists under some category
            try:
                ok = any((TRACEFS / "events").glob(f"*/{name}"))
            except OSError:
                ok = False
            label = f"raw tracepoint {name}"
        else:
            ok = _is_dir(TRACEFS / "events" / category / name)
            label = f"tracepoint {category}:{name}"
        checks.append(Check(label, ok, "present" if ok else "missing",
                            "a kernel with this tracepoint (CONFIG_FTRACE_SYSCALLS, CONFIG_FUSE_FS ...)",
                            required))
    return checks


def check_fuse() -> list[Check]:
    from readtrace.record.program import fuse_supported

    dev = os.path.exists("/dev/fuse")
    return [
        Check("/dev/fuse", dev, "present" if dev else "missing",
              "modprobe fuse; apt-get install -y fuse3", required=False),
        Check("FUSE structs in BTF", fuse_supported(), "fuse_dev, fuse_conn",
              "load the fuse module (modprobe fuse) so /sys/kernel/btf has it", required=False),
    ]


INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO: the host's PID namespace, the same on every kernel


def check_pid_namespace() -> Check:
    """The probes match the kernel's (host) pids; in a container's own PID namespace the command's pid
    is another number and nothing would be recorded (measured: 0 records under unshare --pid)."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = INIT_PID_NS  # no /proc/self/ns: nothing to tell
    ok = ns == INIT_PID_NS
    return Check("host PID namespace", ok, "host" if ok else f"{ns} (a container's own PID namespace)",
                 "run the recorder in the host PID namespace (Kubernetes: hostPID: true; docker: --pid=host)")


def all_checks() -> list[Check]:
    """Every prerequisite, in the order a fix should be attempted."""
    checks = [check_privileges(), check_bcc(), check_headers(), check_tracefs(), check_btf(), check_arch(),
              check_pid_namespace()]
    if checks[3].ok:
        checks += check_tracepoints(list(SOURCES), required=True)
        checks += check_tracepoints([FUSE_SOURCE], required=False)
    checks += check_fuse()
    return checks


def require_prerequisites() -> None:
    """Raise PrerequisiteError with the doctor's line for the first missing requirement."""
    for check in all_checks():
        if check.required and not check.ok:
            raise PrerequisiteError(f"{check.name}: {check.detail}; fix: {check.fix} (see: readtrace doctor)")


def fuse_view_available() -> bool:
    return all(c.ok for c in check_fuse()) and all(c.ok for c in check_tracepoints([FUSE_SOURCE], False))
