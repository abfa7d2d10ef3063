"""FUSE views from a FUSE daemon's own log (gcsfuse), for where the kernel cannot be traced."""
