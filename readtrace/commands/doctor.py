"""Check every prerequisite of `readtrace record` and print the exact fix for what is missing.

Root or CAP_BPF+CAP_PERFMON, bcc, kernel headers, tracefs, kernel BTF, each tracepoint the probes
use, and /dev/fuse + the FUSE structs for the FUSE view. Exit code 3 when something required is missing.
"""

from __future__ import annotations

import argparse

from readtrace.errors import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="list every tracepoint, not only missing ones")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from readtrace.record.prereq import all_checks

    checks = all_checks()
    shown = [c for c in checks if args.all or not c.ok or "tracepoint " not in c.name]
    present = sum(c.ok for c in checks if "tracepoint " in c.name)
    total = sum("tracepoint " in c.name for c in checks)
    table = Table(title="readtrace doctor")
    for column in ("prerequisite", "status", "detail", "fix"):
        table.add_column(column)
    for c in shown:
        status = "[green]OK[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
        table.add_row(c.name, status, c.detail, "" if c.ok else c.fix)
    if not args.all and total:
        table.add_row(f"tracepoints ({total})", "[green]OK[/]" if present == total else "[red]missing[/]",
                      f"{present}/{total} present (--all lists them)", "")
    console = Console()
    console.print(table)
    missing = [c for c in checks if c.required and not c.ok]
    optional = [c for c in checks if not c.required and not c.ok]
    if missing:
        console.print(f"[red]{len(missing)} required prerequisite(s) missing[/]: no eBPF recording; "
                      "readtrace record falls back to --backend ptrace (strace, no page-fault or FUSE view)")
        for c in missing:  # unwrapped, one line each: what to type
            console.print(f"fix ({c.name}): {c.fix}", markup=False, highlight=False, soft_wrap=True)
        return ExitStatus.PREREQUISITE
    note = " (FUSE view unavailable)" if optional else ""
    console.print(f"[green]ready to record[/]{note}")
    return ExitStatus.OK
