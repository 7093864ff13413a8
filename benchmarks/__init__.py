"""Benchmarks that report ratios of like-for-like runs (same head, same threads), interleaved and rotated."""
