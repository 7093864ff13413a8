"""The "importance" statistic set of probe(): registered with the stats registry on import.

probe() streams the data once for its own accumulators; this accumulator only records the token batches
it saw (ids and masks, no activations) and, when the rows are asked for, runs the importance suite on
those same batches (suite.py: clean pass, batched ablations, per-sequence gradients), then the Spearman
agreement of every proxy present in the run (alignment rows included with `--stats all`) with the
ablation effect. probe() hands it the model with `bind` (see tlm_probe/probe.py).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from tlm_probe.importance.agreement import PROXIES, TARGETS, spearman_rows
from tlm_probe.importance.logit_lens import LENS_STATS
from tlm_probe.importance.options import DEFAULT_ABLATIONS, ImportanceOptions, options_from
from tlm_probe.importance.suite import run_importance
from tlm_probe.stats.accumulator import Accumulator, register_accumulator

PER_LAYER = (
    *LENS_STATS,
    *(f"ablation_{m}_{a}" for m in ("dnll", "shift") for a in DEFAULT_ABLATIONS),
    "taylor_mlp",
    "fisher_mlp",
    "grad_norm_mlp",
    "effective_rank",
    "participation_ratio",
    "anisotropy",
    "dead_neuron_frac",
    "stable_rank_mlp_out",
    "probe_acc",
)
MATRICES = (
    "angular_distance",
    "angular_distance_last",
    "cka_linear",
    "drop_block_best",
    "drop_block_best_last",
)
AGREEMENT = tuple(f"spearman_{p}" for p in PROXIES)
STATISTICS = PER_LAYER + MATRICES + AGREEMENT
GRADIENT_STATS = ("taylor_mlp", "fisher_mlp", "grad_norm_mlp")


def _tracker(progress: bool):
    if not progress:
        return lambda it, description: it
    from rich.progress import track

    return lambda it, description: track(it, description=description, transient=True)


def _wanted_ablations(wanted: tuple[str, ...]) -> tuple[str, ...]:
    kinds = [
        a for a in DEFAULT_ABLATIONS if any(w.endswith(f"_{a}") and w.startswith("ablation_") for w in wanted)
    ]
    if any(w.startswith("spearman_") for w in wanted) and "mlp_zero" not in kinds:
        kinds.insert(0, "mlp_zero")  # the agreement target
    return tuple(kinds)


class ImportanceAccumulator(Accumulator):
    """Records the batches; computes everything in `result()` (called once, cached) after the stream."""

    def __init__(self, n_layers: int, d_ff: tuple[int, ...], wanted: tuple[str, ...]):
        super().__init__(n_layers, d_ff)
        self.wanted = tuple(wanted)
        self.batches: list[dict] = []
        self.pm = None
        self.others: list[Accumulator] = []
        self.options = ImportanceOptions()
        self.progress = False
        self._result = None
        self.agreement_target: str | None = None

    def bind(self, pm, exclude_bos=False, others=(), options: dict | None = None, progress=False) -> None:
        """The model to ablate and differentiate, the other accumulators of the run (for agreement)."""
        self.pm, self.others, self.progress = pm, [a for a in others if a is not self], progress
        grads = any(w in GRADIENT_STATS or w.startswith("spearman_") for w in self.wanted)
        base = options_from({**(options or {}), "exclude_bos": exclude_bos})
        ablations = _wanted_ablations(self.wanted)
        self.options = replace(base, ablations=ablations, grad_sequences=base.grad_sequences if grads else 0)

    def end_batch(self, batch) -> None:
        self.batches.append(
            {
                "input_ids": batch.input_ids.detach().cpu(),
                "attention_mask": batch.attention_mask.detach().cpu(),
            }
        )

    def result(self):
        if self._result is None:
            if self.pm is None:
                raise RuntimeError("ImportanceAccumulator.bind(pm, ...) was not called before rows()")
            with torch.inference_mode(False):
                # probe() streams under inference_mode; gradients need ordinary tensors
                batches = [{k: v.clone() for k, v in b.items()} for b in self.batches]
                self._result = run_importance(self.pm, batches, self.options, _tracker(self.progress))
        return self._result

    def rows(self) -> list[dict]:
        if not self.batches:
            return []
        rows, _, _ = self.result()
        mine = [r for r in rows if r["statistic"] in self.wanted]
        return mine + [r for r in self.agreement(rows) if r["statistic"] in self.wanted]

    def agreement(self, rows: list[dict]) -> list[dict]:
        """Spearman rows (layer -1) over the per-layer rows of this run: importance and the others."""
        df = pd.DataFrame(rows + [r for acc in self.others for r in acc.rows()])
        per_layer = {s: g.sort_values("layer")["value"].to_numpy() for s, g in df.groupby("statistic")}
        target = next((t for t in TARGETS if t in per_layer), None)
        self.agreement_target = target
        if target is None:
            return []
        return [dict(layer=-1, std=float("nan"), **r) for r in spearman_rows(per_layer, target)]

    def matrix_rows(self) -> list[dict]:
        if not self.batches:
            return []
        _, mats, _ = self.result()
        return [m for m in mats if m["statistic"] in self.wanted]

    def provenance(self) -> dict:
        if not self.batches:
            return {}
        _, _, info = self.result()
        return {
            "importance": {
                **info,
                "agreement_target": self.agreement_target,
                "options": {k: v for k, v in self.options.__dict__.items() if k != "probe_labels"},
            }
        }


register_accumulator("importance", ImportanceAccumulator, STATISTICS)
