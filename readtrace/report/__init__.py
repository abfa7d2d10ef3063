"""Reporters: built from an Analysis, then rendered (terminal, JSON, HTML with plots, Perfetto)."""

from readtrace.report.jsonreport import report_json

__all__ = ["report_json"]
