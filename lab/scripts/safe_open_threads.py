"""safe_open once, 4 threads each get_tensor its quarter of the names in order: 4 sequential
readers on one mapping (one FUSE handle)."""

import sys
from concurrent.futures import ThreadPoolExecutor

from _digest import report
from safetensors import safe_open

with safe_open(sys.argv[1], framework="pt") as f, ThreadPoolExecutor(4) as pool:
    names = list(f.keys())
    step = -(-len(names) // 4)
    shares = [names[i:i + step] for i in range(0, len(names), step)]
    parts = pool.map(lambda share: {name: f.get_tensor(name) for name in share}, shares)
    report("safe_open_threads", {k: v for part in parts for k, v in part.items()})
