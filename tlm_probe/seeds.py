"""The one range of seeds every command accepts: what all the RNGs a seed reaches take. NumPy's legacy
seeding (np.random.seed, which lm-evaluation-harness calls with --seed) wants 0 <= seed < 2**32; torch takes
more, default_rng any non-negative integer; a seed outside the smallest range failed deep inside as a
ValueError."""

from __future__ import annotations

import numbers

from tlm_probe.errors import UserError

SEED_MAX = 2**32 - 1


def check_seed(seed, name: str = "seed") -> int:
    """`seed` as a Python int (NumPy's integers are integers), or one UserError."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
        raise UserError(f"{name} must be an integer in [0, {SEED_MAX}] (NumPy's seeding, which the eval "
                        f"harness uses, takes no more), got {seed!r}")
    return int(seed)
