"""Darshan's access-size bins (POSIX_SIZE_READ_*)."""

import numpy as np

# Lower edges in bytes; a size falls in bin i when EDGES[i] <= size < EDGES[i + 1].
EDGES = np.array([0, 100, 1_000, 10_000, 100_000, 1_000_000, 4_000_000, 10_000_000, 100_000_000,
                  1_000_000_000], dtype=np.int64)
LABELS = ("0-100", "100-1K", "1K-10K", "10K-100K", "100K-1M", "1M-4M", "4M-10M", "10M-100M",
          "100M-1G", "1G+")


def size_bin(nbytes: np.ndarray) -> np.ndarray:
    """Bin index of each access size."""
    return np.searchsorted(EDGES, nbytes, side="right") - 1


def histogram(codes: np.ndarray, n_groups: int, nbytes: np.ndarray) -> np.ndarray:
    """Counts per (group, bin): shape (n_groups, len(LABELS))."""
    flat = codes * len(LABELS) + size_bin(nbytes)
    return np.bincount(flat, minlength=n_groups * len(LABELS)).reshape(n_groups, len(LABELS))
