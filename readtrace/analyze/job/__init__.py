"""A job of several nodes and ranks: per-node analyses joined (``analysis``), on a Dask cluster
(``cluster``), and per rank (``ranks``)."""
