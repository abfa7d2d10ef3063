"""The host side of ``readtrace fix``: rerun a command cold with and without the fix and compare."""
