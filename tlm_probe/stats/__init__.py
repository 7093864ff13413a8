"""Streaming statistics: accumulators that read captured pieces and keep float64 sums; no I/O.

Import from the modules themselves (accumulator, alignment, moments, pieces, reduce): this file imports
nothing, so the torch-free modules of the package (sweep, paired and power: the tables `tlm plot`,
`tlm report` and `tlm compare` read and write) stay torch-free."""
