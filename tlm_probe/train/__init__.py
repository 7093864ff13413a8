"""Training: TrainConfig (config.py), run_training top to bottom (training.py), the loop, checkpoints,
distributed set-up, and comparisons of arms x seeds (compare.py, sweep.py)."""
