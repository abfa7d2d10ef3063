"""The per-trace views: accesses, streams, interleave, FUSE nodes, page-cache misses, read fronts,
time split, and which loader call issued the reads (attribution)."""
