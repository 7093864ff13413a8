"""Flags of a tiny training run (2 steps of a 2-layer, 32-wide model), shared by the CLI tests."""

TINY = [
    "--steps", "2", "--threads", "1", "--multiple-of", "16", "--seq-len", "16", "--d-model", "32",
    "--layers", "2", "--heads", "2", "--d-ff", "64", "--eval-tokens", "64", "--batch-size", "2",
    "--eval-interval", "2",
]
