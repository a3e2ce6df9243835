"""Benchmark fixtures: jobs built from real traces with a known truth (ranks.py: an N-rank job with stragglers)."""
