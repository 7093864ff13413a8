"""The names of the files of a probe result folder: a module of its own, importable without pandas, so that
`tlm probe` checks its --out folder before its seconds of imports (tlm_probe.results re-exports them)."""

RESULTS, MATRICES, AGREEMENT, PROVENANCE = "results", "matrices", "agreement", "provenance.json"
PROBE_FILES = {f"{stem}.{ext}" for stem in (RESULTS, MATRICES, AGREEMENT) for ext in ("csv", "parquet")}
PROBE_FILES |= {PROVENANCE}
"""Every file a probe writes into its folder: the ones it may replace there."""
