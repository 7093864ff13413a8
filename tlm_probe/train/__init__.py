"""Training: TrainConfig (config.py), run_training top to bottom (training.py), the loop, checkpoints,
distributed set-up, and comparisons of arms x seeds (compare.py, sweep.py)."""

from tlm_probe.public_call import make_callable

make_callable(__name__)  # tp.train(...) is tlm_probe.api.library.train
