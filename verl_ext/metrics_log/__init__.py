"""Streaming per-step metrics logs."""

from verl_ext.metrics_log.jsonl import JsonlMetricsWriter, read_jsonl, to_json_value, truncate_after

__all__ = ["JsonlMetricsWriter", "read_jsonl", "to_json_value", "truncate_after"]
