"""The BPF program's C sources, shipped as the package data of ``readtrace.probes`` (read them with
importlib.resources; see readtrace/record/program.py)."""
