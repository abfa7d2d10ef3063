"""readtrace.memory: around a batch analysis freed big arrays stay in the heap for the next ones (no
fresh page faults), and are given back after; outside it glibc unmaps them at once."""

import subprocess
import sys

PROBE = """
import os, numpy as np
from readtrace.memory import reuse_freed_memory
page = os.sysconf("SC_PAGE_SIZE")
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * page >> 20
def alloc_free():
    a = np.ones(256 << 20, dtype=np.uint8); del a
base = rss_mib(); alloc_free(); outside = rss_mib() - base
with reuse_freed_memory():
    base = rss_mib(); alloc_free(); kept = rss_mib() - base
    alloc_free(); again = rss_mib() - base
after = rss_mib() - base
print(outside, kept, again, after)
"""


def test_freed_arrays_are_kept_inside_and_given_back_after():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    outside, kept, again, after = (int(x) for x in out.stdout.split())
    assert outside < 32, out.stdout  # unmapped when freed
    assert kept >= 200 and again < kept + 32, out.stdout  # kept, and the second array reuses it
    assert after < 32, out.stdout  # trimmed when the analysis is done
