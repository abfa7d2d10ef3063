"""The kernel page cache of checkpoint files: prefetch, pin, residency, eviction (standard library only)."""
