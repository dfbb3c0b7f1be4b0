"""Trace-replay simulator: engines, cluster, actuation and policies (see docs/benchmarks.md)."""
