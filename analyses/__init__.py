"""Notebooks and scripts that reproduce the experiments; `python -m analyses.make_figures` writes figures/."""
