"""Code that runs inside the user's process during a rerun: the sitecustomize hook, the shim, the
start-up prefetch, and the environment/manifest contract with the host (``readtrace fix``).
"""
