"""Recorder cost: untraced vs `readtrace record` vs bpftrace one-liners vs strace, side by side in one run.

  sudo .venv/bin/python benchmarks/bench_record.py [--repeat 3] [--only pread_4k ...] [--modes ...]
                                                   [--out bench-results/record.json]

Modes (per repeat every workload runs once in each mode, modes interleaved):
  untraced        the workload alone
  readtrace       `readtrace record -- WORKLOAD` (every call recorded; runs merged in kernel)
  bpftrace_hist   `bpftrace -c WORKLOAD`: a latency histogram per read-syscall tracepoint pair
                  (syscalls:sys_enter_X / sys_exit_X, X = read, pread64, readv, preadv, preadv2; pid == cpid)
  bpftrace_count  `bpftrace -c WORKLOAD`: one count per read-syscall enter tracepoint (pid == cpid)
  strace          `strace -f -o /dev/null -e trace=<the syscalls readtrace records> WORKLOAD`
  hooks_empty     readtrace's hook set attached, every handler returning at once (hooks_floor.py):
                  the floor of any recorder on these hooks (the kernel's traced-syscall path + the
                  program invocations)
  hooks_filter    the same, every handler doing readtrace's first test only (is this tgid traced?)
  hooks_per_syscall  hooks_filter with the raw sys_enter/sys_exit pair replaced by the per-syscall
                  tracepoints of the syscalls readtrace records: what unrelated syscalls cost without the pair
Workloads (each times only its own I/O section, wall and CPU time, so the probe compile and Python
start-up are not counted; the recorder's CPU use during the run is, since it shares the machine):
  safetensors  load_file() of a 1 GiB safetensors file + touch every page, warm, 10 times in a row
                                                                                 target <= 1.05x
  seq_1m       1 MiB sequential readv() of a 1 GiB file, warm                     target <= 1.05x
  pread_4k     4 KiB os.pread() storm over a warm 1 GiB file (262,144 calls)     target <= 1.30x
  preadv_4k    the same with os.preadv() into one reused buffer (the probe also reads the iovec)
  events       4 KiB preads at descending offsets (nothing merges; pread_storm.c with 2 threads, or
               Python without a C compiler): records/s recorded, readtrace only   target >= 3 M/s, 0 lost
  bystander_pread_4k  pread_4k run UNtraced while the tracer records another command (sleep): what an
               unrelated process pays while the probes are attached              target <= 1.05x
  bystander_syscalls  the same with an os.fstat() storm (262,144 calls of a syscall nobody records)
                                                                                 target <= 1.05x
Targets apply to the readtrace column; bpftrace and strace are the comparison. strace costs a bystander
nothing (ptrace stops only its tracee): no strace bystander rows. Ratios are medians over the repeats
of traced / untraced of the same repeat (run back to back); "cpu" is the workload's own CPU time (less disturbed by other jobs on a shared
machine than wall time). Run as root. Files live in /tmp/readtrace-bench (kept for reruns).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
DATA_DIR = Path("/tmp/readtrace-bench")
PREAD_CALLS = GIB // 4096
SAFETENSORS_LOADS = 10
TARGETS = {"safetensors": 1.05, "seq_1m": 1.05, "pread_4k": 1.30, "bystander_pread_4k": 1.05,
           "bystander_syscalls": 1.05}
EVENTS_TARGET = 3_000_000


# ---- workloads (run in a child process: `bench_record.py --run NAME FILE RESULT_JSON`) -------------
def warm(path: str) -> None:
    """Read the file once so the timed section finds it in the page cache (other jobs evict it)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def _timed(t0: float, c0: float) -> dict:
    """Wall and CPU seconds since (perf_counter, process_time) = (t0, c0)."""
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def run_safetensors(path: str) -> dict:
    import torch
    from safetensors.torch import load_file

    warm(path)
    t0, c0 = time.perf_counter(), time.process_time()
    touched = loaded = 0
    for _ in range(SAFETENSORS_LOADS):  # one warm load maps 1 GiB in ~10 ms here: too short to time alone
        tensors = load_file(path)
        touched += sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in tensors.values())  # every page
        loaded += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    return {**_timed(t0, c0), "bytes": loaded, "checksum": touched}


def run_seq_1m(path: str) -> dict:
    warm(path)
    buf = bytearray(1 << 20)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    t0, c0 = time.perf_counter(), time.process_time()
    while n := os.readv(fd, [buf]):
        total += n
    timed = _timed(t0, c0)
    os.close(fd)
    return {**timed, "bytes": total}


def _preads(path: str, offsets, vectored: bool = False) -> dict:
    """os.pread (the pread64 syscall), or os.preadv into one reused buffer (preadv2 syscall)."""
    buf = bytearray(4096)
    fd = os.open(path, os.O_RDONLY)
    pread, preadv = os.pread, os.preadv
    calls = 0
    t0, c0 = time.perf_counter(), time.process_time()
    if vectored:
        for off in offsets:
            preadv(fd, [buf], off)
            calls += 1
    else:
        for off in offsets:
            pread(fd, 4096, off)
            calls += 1
    timed = _timed(t0, c0)
    os.close(fd)
    return {**timed, "bytes": calls * 4096, "calls": calls}


def run_pread_4k(path: str) -> dict:
    warm(path)
    return _preads(path, range(0, os.path.getsize(path), 4096))


def run_preadv_4k(path: str) -> dict:
    warm(path)
    return _preads(path, range(0, os.path.getsize(path), 4096), vectored=True)


def run_syscalls(path: str) -> dict:
    """os.fstat() 262,144 times: a syscall-heavy process whose syscalls nobody records."""
    fd = os.open(path, os.O_RDONLY)
    fstat = os.fstat
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(PREAD_CALLS):
        fstat(fd)
    timed = _timed(t0, c0)
    os.close(fd)
    return {**timed, "bytes": 0, "calls": PREAD_CALLS}


def run_events(path: str) -> dict:
    """benchmarks/pread_storm.c when a C compiler is there (~3x the call rate of Python), else Python."""
    import shutil
    import subprocess

    exe = DATA_DIR / "pread_storm2"
    source = Path(__file__).resolve().parent / "pread_storm.c"
    if not exe.exists() and shutil.which("cc"):
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(source)], check=True)
    if exe.exists():
        threads = str(max(1, min(2, os.cpu_count() or 1)))
        out = subprocess.run([str(exe), path, threads], check=True, capture_output=True, text=True).stdout
        return {**json.loads(out), "producer": f"C, {threads} threads"}
    size = os.path.getsize(path)
    return {**_preads(path, range(size - 4096, -1, -4096)), "producer": "python"}


WORKLOADS = {"safetensors": run_safetensors, "seq_1m": run_seq_1m, "pread_4k": run_pread_4k,
             "preadv_4k": run_preadv_4k, "events": run_events, "syscalls": run_syscalls}
# "bystander_*": the workload runs UNtraced while the tracer records another command: the cost every
# process pays while the probes are attached.
BYSTANDER_OF = {"bystander_pread_4k": "pread_4k", "bystander_syscalls": "syscalls"}
RUNS = [name for name in WORKLOADS if name != "syscalls"] + list(BYSTANDER_OF)


# ---- set-up -----------------------------------------------------------------------------------
def make_files() -> dict[str, Path]:
    DATA_DIR.mkdir(exist_ok=True)
    raw, st = DATA_DIR / "raw-1g.bin", DATA_DIR / "model-1g.safetensors"
    if not raw.exists() or raw.stat().st_size != GIB:
        with open(raw, "wb") as f:
            block = os.urandom(16 << 20)
            for _ in range(GIB // len(block)):
                f.write(block)
    if not st.exists():
        import torch
        from safetensors.torch import save_file

        g = torch.Generator().manual_seed(0)
        tensors = {f"layer{i:02d}.weight": torch.randn(1024, 4096, generator=g) for i in range(64)}  # 16 MiB each
        save_file(tensors, str(st))
    for path in (raw, st):
        warm(str(path))
    return {"safetensors": st, **{name: raw for name in RUNS if name != "safetensors"}}


# ---- tracers ---------------------------------------------------------------------------------
MODES = ("untraced", "readtrace", "bpftrace_hist", "bpftrace_count", "strace", "hooks_empty", "hooks_filter",
         "hooks_per_syscall")
READ_SYSCALLS = ("read", "pread64", "readv", "preadv", "preadv2")
# what readtrace records (record/program.py SYSCALL_NUMBERS), for strace's -e trace=
STRACE_SET = "open,openat,openat2,close,dup,dup2,dup3,fcntl,read,pread64,readv,preadv,preadv2,mmap,munmap,lseek,fadvise64,readahead"


def bpftrace_program(mode: str) -> str:
    enters = ",".join(f"tracepoint:syscalls:sys_enter_{c}" for c in READ_SYSCALLS)
    if mode == "bpftrace_count":
        return f"{enters} /pid == cpid/ {{ @calls[probe] = count(); }}"
    exits = ",".join(f"tracepoint:syscalls:sys_exit_{c}" for c in READ_SYSCALLS)
    return (f"{enters} /pid == cpid/ {{ @start[tid] = nsecs; }} "
            f"{exits} /@start[tid]/ {{ @ns[probe] = hist(nsecs - @start[tid]); delete(@start[tid]); }}")


def missing_tools(modes: list[str]) -> dict[str, str]:
    """Modes whose tracer is not installed here -> the tool's name (those columns are left out)."""
    import shutil

    tools = {m: m.split("_")[0] for m in modes if m.startswith(("bpftrace", "strace"))}
    return {m: tool for m, tool in tools.items() if shutil.which(tool) is None}


def tracer_argv(mode: str, cmd: list[str], scratch: Path) -> list[str]:
    """The command line that runs ``cmd`` under ``mode``'s tracer (its output kept out of the way)."""
    import shlex

    if mode == "readtrace":
        return [sys.executable, "-m", "readtrace", "record", "-q", "-f", "-o", str(scratch / "run.rtrace"), "--", *cmd]
    if mode.startswith("bpftrace"):
        return ["bpftrace", "-o", str(scratch / "bpftrace.out"), "-c", shlex.join(cmd), "-e", bpftrace_program(mode)]
    if mode == "strace":
        return ["strace", "-f", "-o", "/dev/null", "-e", f"trace={STRACE_SET}", *cmd]
    if mode.startswith("hooks_"):
        return [sys.executable, str(Path(__file__).resolve().parent / "hooks_floor.py"), mode.removeprefix("hooks_"), "--", *cmd]
    return cmd


def run_bystander(mode: str, cmd: list[str], scratch: Path) -> None:
    """Run cmd untraced while ``mode``'s tracer records another command (the probes' system-wide cost)."""
    import signal
    import subprocess

    marker, sleeper = scratch / "bystander.started", scratch / "sleeper.sh"
    marker.unlink(missing_ok=True)
    sleeper.write_text(f"touch {marker}; exec sleep 300\n")  # one word per argument: bpftrace -c splits on spaces
    tracer = subprocess.Popen(tracer_argv(mode, ["/bin/sh", str(sleeper)], scratch), stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if time.monotonic() > deadline or tracer.poll() is not None:
                raise RuntimeError(f"bystander: {mode} did not start")
            time.sleep(0.05)
        subprocess.run(cmd, check=True)
    finally:
        for pid in _children(tracer.pid):  # end the traced sleeper: the tracer then ends by itself
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            tracer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=60)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except OSError:
        return []


def run_once(name: str, path: Path, mode: str, scratch: Path) -> dict:
    import subprocess

    result_file = scratch / f"{name}-{mode}.json"
    result_file.unlink(missing_ok=True)
    workload = BYSTANDER_OF.get(name, name)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run", workload, str(path), str(result_file)]
    if mode != "untraced" and name in BYSTANDER_OF:
        run_bystander(mode, cmd, scratch)
        return {**json.loads(result_file.read_text()), "lost": 0}
    if mode == "readtrace":
        from readtrace.record import record_command
        from readtrace.trace import load_trace

        trace_path = scratch / f"{name}.rtrace"
        rec = record_command(cmd, trace_path, force=True, quiet=True)
        result = json.loads(result_file.read_text())
        trace = load_trace(trace_path)
        mine_e = trace.events[trace.events.path == str(path)]
        mine_p = trace.pages[trace.pages.path == str(path)]
        result.update(lost=rec.lost_events, records_total=rec.events,
                      records_file=len(mine_e) + len(mine_p), calls_file=int(mine_e["count"].sum()))
        return result
    subprocess.run(tracer_argv(mode, cmd, scratch), check=True, stdout=subprocess.DEVNULL)
    return {**json.loads(result_file.read_text()), "lost": 0}


def modes_for(name: str, modes: list[str]) -> list[str]:
    if name == "events":
        return [m for m in modes if m in ("untraced", "readtrace")]
    if name in BYSTANDER_OF:
        return [m for m in modes if m != "strace"]
    return modes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=RUNS)
    parser.add_argument("--modes", nargs="*", choices=MODES, default=list(MODES))
    parser.add_argument("--out", default="bench-results/record.json")
    parser.add_argument("--run", nargs=3, metavar=("NAME", "FILE", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        name, path, out = args.run
        Path(out).write_text(json.dumps(WORKLOADS[name](path)))
        return 0
    if os.geteuid() != 0:
        print("bench_record: needs root (eBPF)", file=sys.stderr)
        return 3
    absent = missing_tools(args.modes)
    for tool in sorted(set(absent.values())):
        print(f"bench_record: {tool} is not installed (apt-get install {tool}): its columns are left out",
              file=sys.stderr)
    modes = ["untraced", *(m for m in args.modes if m != "untraced" and m not in absent)]
    files = make_files()
    names = args.only or RUNS
    results = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        for name in names:
            runs = {mode: [] for mode in modes_for(name, modes)}
            for _ in range(args.repeat):  # interleaved: every mode once per repeat
                for mode in runs:
                    runs[mode].append(run_once(name, files[name], mode, Path(tmp)))
                loads.append(os.getloadavg()[0])
            results[name] = summarize(name, runs)
    report = {"machine": machine(), "load_avg_1m": {"min": min(loads), "max": max(loads)}, "repeat": args.repeat,
              "command": " ".join(sys.argv), "results": results}
    print_table(results, report["load_avg_1m"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"saved {out}")
    return 0


def summarize(name: str, runs: dict) -> dict:
    def median(mode, key):
        values = [r[key] for r in runs[mode] if key in r]
        return statistics.median(values) if values else None

    base, base_cpu = median("untraced", "seconds"), median("untraced", "cpu_s")
    out = {"untraced_s": base, "untraced_cpu_s": base_cpu, "bytes": runs["untraced"][0]["bytes"], "modes": {}, "runs": runs}
    for mode in runs:
        if mode == "untraced":
            continue
        out["modes"][mode] = {"s": median(mode, "seconds"), "ratio": paired_ratio(runs, mode, "seconds"),
                              "cpu_ratio": paired_ratio(runs, mode, "cpu_s"),
                              "lost": max(r["lost"] for r in runs[mode])}
    rt = out["modes"].get("readtrace")
    if name == "events" and rt:
        rates = [r["records_file"] / r["seconds"] for r in runs["readtrace"]]
        out.update(events_per_s_median=statistics.median(rates), events_per_s_best=max(rates), target=EVENTS_TARGET)
        out["ok"] = out["events_per_s_median"] >= EVENTS_TARGET and rt["lost"] == 0
    elif name in TARGETS and rt:
        out["target"] = TARGETS[name]
        out["ok"] = rt["ratio"] <= TARGETS[name] and rt["lost"] == 0
    return out


def paired_ratio(runs: dict, mode: str, key: str) -> float | None:
    """Median over the repeats of (mode's run / the untraced run of the same repeat): each pair ran
    back to back, so the machine's drift between repeats cancels."""
    pairs = [t[key] / u[key] for t, u in zip(runs[mode], runs["untraced"], strict=True) if key in t and u.get(key)]
    return statistics.median(pairs) if pairs else None


def machine() -> dict:
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1)}


def print_table(results: dict, load: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"recorder cost: median of paired traced/untraced, wall (cpu) - load avg {load['min']:.1f}-{load['max']:.1f} "
                        f"on {os.cpu_count()} CPUs")
    for col in ("workload", "untraced s", *(m for m in MODES if m != "untraced"), "target (readtrace)", "lost", "ok"):
        table.add_column(col)
    for name, r in results.items():
        cells = []
        for mode in MODES[1:]:
            m = r["modes"].get(mode)
            cpu = f" ({m['cpu_ratio']:.2f})" if m and m["cpu_ratio"] is not None else ""
            cells.append(f"{m['ratio']:.2f}x{cpu}" if m else "-")
        if name == "events":
            cells[0] = f"{r.get('events_per_s_median', 0):,.0f}/s"
            target = f">= {EVENTS_TARGET:,}/s"
        else:
            target = f"<= {r['target']:.2f}x" if "target" in r else "(info)"
        lost = str(r["modes"]["readtrace"]["lost"]) if "readtrace" in r["modes"] else "-"
        ok = ("yes" if r["ok"] else "NO") if "ok" in r else "-"
        table.add_row(name, f"{r['untraced_s']:.3f}", *cells, target, lost, ok)
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
