"""A mount measured: ``readtrace probe``'s measurement (``probe``, reads only) and the per-mount cache of
the profiles it measured (``profile``). Above fs/ (the facts) and pagecache/ (it evicts what it reads)."""
