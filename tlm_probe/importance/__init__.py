"""Layer importance beyond alignment (issue 5): what each layer does for the model, measured in one run.

`tlm probe MODEL --stats importance` (or `--stats all`, with alignment) adds, per layer:
  logit_lens_{kl,ce,entropy,top1}        logit_lens.py   causal LMs only (final norm + unembedding)
  ablation_dnll_{mlp_zero,mlp_mean,mlp_resample,attn_zero,block_skip}
                                         ablation*.py    NLL increase; encoders: ablation_shift_* instead
  taylor_mlp, fisher_mlp, grad_norm_mlp  gradients.py    causal LMs only
  effective_rank, participation_ratio, anisotropy        geometry.py
  dead_neuron_frac, stable_rank_mlp_out  utilisation.py
  probe_acc                              linear_probes.py
per model (agreement.csv): spearman_<proxy> against the MLP zero-ablation effect (agreement.py), and
layer x layer (matrices table): angular_distance[_last], cka_linear, drop_block_best[_last] (tables.py).

Each statistic's row (statistic_names.STATISTICS) says what it needs; suite.py is the second pass that
probe/engine.py runs on a bounded set of the probed sequences; a row's `compute` function (tables.py) is
loaded by its import path.
"""

from tlm_probe.importance.agreement import spearman_rows
from tlm_probe.importance.cost import CostNotice
from tlm_probe.importance.options import ImportanceOptions, options_from
from tlm_probe.importance.stream_ablations import StreamAblations, fusable
from tlm_probe.importance.suite import expected_passes, run_importance
from tlm_probe.statistic_names import AGREEMENT, TARGETS, needs, reasons, spearman_parts

__all__ = ["AGREEMENT", "CostNotice", "TARGETS", "expected_passes", "fusable", "ImportanceOptions", "needs",
           "options_from", "reasons", "run_importance", "spearman_parts", "spearman_rows", "StreamAblations"]
