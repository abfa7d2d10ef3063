"""The lab harness of the tests and benchmarks, not shipped in the wheel: the compatibility suite's
servers, FUSE clients, checkpoints, loaders and cells, and the synthetic traces (``lab.synthetic``).
Importable from the repository root (pytest's ``pythonpath``, the benchmarks put the root on sys.path)."""
