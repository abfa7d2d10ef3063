"""The eBPF recorder: ``record_command(cmd, output)`` runs a command under the probes and writes a trace."""

from readtrace.record.recorder import RecordResult, record_command

__all__ = ["RecordResult", "record_command"]
