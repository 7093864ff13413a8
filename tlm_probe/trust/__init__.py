"""`tlm trust MODEL --data A --data B`: can an importance statistic be trusted? Its per-layer ranking across
corpora (Kendall's W, pairwise Spearman) and against the ablation target (options.py, agreement.py,
engine.py)."""
