"""`tlm trust MODEL --data A --data B`: can an importance statistic be trusted? Its per-layer ranking across
corpora (Kendall's W, pairwise Spearman), against the ablation target and against the accuracy lost on
multiple-choice tasks when each layer is ablated (options.py, agreement.py, task_target.py, engine.py)."""
