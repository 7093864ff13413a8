"""Streaming statistics: accumulators that read captured pieces and keep float64 sums; no I/O.

Import from the modules themselves (accumulator, alignment, moments, pieces, reduce): this file imports
nothing, so the torch-free modules of the package (sweep, the tables `tlm plot` and `tlm report` read)
stay torch-free."""
