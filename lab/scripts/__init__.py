"""Small load scripts, one per loader, written the way users write them (run as
``python lab/scripts/NAME.py CHECKPOINT DIGESTS``). Each appends one JSON line to
DIGESTS: the loader, the tensor count and one sha256 over every loaded tensor (``_digest.py``)."""
