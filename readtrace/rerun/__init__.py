"""The contract between ``readtrace fix`` / ``record`` (the host) and the Python processes of a rerun
(the child): imported by both sides, standard library only, and this file imports nothing.

``protocol``: the ``Rerun`` settings in the environment, the strategies, the manifest's one writer;
``rankplan``: which bytes each torchrun rank prefetches; ``environment`` (host only): the environment
that puts the shim (readtrace/inject/) into an unchanged command."""
