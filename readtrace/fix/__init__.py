"""Remediation: the own-fd sequential loader, the page-cache prefetcher, eviction and the rerun shim."""
