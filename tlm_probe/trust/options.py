"""TrustOptions (light: `tlm trust`'s options are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tlm_probe.data.sources import SPLIT_CHOICES, SPLIT_HELP
from tlm_probe.errors import UserError

DEFAULT_STATS = ("block_influence,mlp_influence,norm_ratio_mlp,align_mlp_mid,align_abs_mlp_mid,"
                 "logit_lens_kl,ablation_dnll_mlp_zero")


@dataclass(frozen=True, kw_only=True)
class TrustOptions:
    """What `tlm trust` measures: each statistic's per-layer ranking on every corpus."""

    data: tuple[str, ...] = ()
    """A corpus to probe on (repeatable, two or more): any `tlm probe --data` source."""
    stats: str = DEFAULT_STATS
    """The per-layer statistics to judge, comma separated; the target must be among them."""
    target: str = "ablation_dnll_mlp_zero"
    """The statistic the others should agree with: what removing a layer's MLP costs."""
    min_w: float = 0.7
    """Flag a statistic whose Kendall's W across the corpora is below this."""
    min_spearman: float = 0.5
    """Flag a statistic whose rank correlation with the target (median over corpora), or between two
    corpora (the lowest pair), is below this."""
    split: str = field(default="auto", metadata={"help": SPLIT_HELP})
    """See data/sources.py SPLIT_HELP."""
    max_tokens: int = 16_384
    """Tokens probed per corpus (0: all)."""
    seq_len: int = 0
    """Tokens per sequence (0: as tlm probe)."""
    batch_size: int = 8
    """Sequences per forward pass."""
    device: str = "auto"
    """auto (a GPU when there is one, else the CPU) | cpu | cuda | cuda:N | mps"""

    def __post_init__(self):
        if len(self.data) < 2:
            raise UserError("tlm trust compares rankings across corpora: give --data at least twice")
        names = [s.strip() for s in self.stats.split(",") if s.strip()]
        if self.target not in names:
            raise UserError(f"--target {self.target} must be one of --stats ({', '.join(names)})")
        if self.split not in SPLIT_CHOICES:
            raise UserError(f"--split must be one of {', '.join(SPLIT_CHOICES)}, got {self.split!r}")
        if not (0 <= self.min_w <= 1 and -1 <= self.min_spearman <= 1):
            raise UserError("--min-w must be in [0, 1] and --min-spearman in [-1, 1]")
