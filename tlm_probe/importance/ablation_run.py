"""Ablation effects, batched: G ablations share one forward pass on the batch repeated G times.

Causal LMs: `ablation_dnll_<name>` = token mean of NLL(next token | ablated) - NLL(next token | clean).
Encoders have no LM loss (all-MiniLM-L6-v2 ships no MLM head), so they get `ablation_shift_<name>` =
token mean of 1 - cos(final hidden state clean, ablated): how far the ablation moves the representation
the encoder hands to its users.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from tlm_probe.importance.ablation import Ablation, Calibration, ablating, repeat_batch
from tlm_probe.importance.restart import Restart
from tlm_probe.importance.streaming import TokenMean

Reference = Callable[[torch.Tensor, dict], torch.Tensor]
Metric = Callable[[torch.Tensor, torch.Tensor, dict, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def token_nll(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, T, V), (B, T) -> (B, T-1) NLL of token t+1 given the prefix up to t: models.tlm.next_token_nll
    with reduction="none" (tests/test_probe_fixed_costs.py holds them equal), written here because
    importing models/tlm.py imports transformer_lens, seconds of start-up every probe of a Hugging Face
    model paid for one cross-entropy."""
    targets = input_ids[:, 1:]
    flat = logits[:, : targets.shape[1]].flatten(0, 1).float()
    return F.cross_entropy(flat, targets.flatten(), reduction="none").view_as(targets)


NLL_CHUNK = 1 << 22
"""Logits per chunk of lse_nll (16 MiB in float32): a block the elementwise passes reread from cache."""


@torch.no_grad()
def lse_nll(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """token_nll without autograd: (B, T, V), (B, T) -> (B, T-1) float32 lse(z) - z[next], one sequence and
    a chunk of positions at a time. cross_entropy writes and rereads a (B, T, V) log-softmax, which at a
    32k vocabulary cost more than half the head's matmul per ablated forward, work the pass count does not
    hold (issue 24); here each chunk is a max, an exp and a sum over a block still in cache."""
    B, T, V = logits.shape
    step = max(1, NLL_CHUNK // V)
    out = torch.empty(B, T - 1, dtype=torch.float32, device=logits.device)
    buf = None
    for b in range(B):
        for i in range(0, T - 1, step):
            z = logits[b, i : min(i + step, T - 1)].float()  # (n, V)
            if buf is None or buf.shape != z.shape:
                buf = torch.empty_like(z)
            m = z.amax(-1)
            lse = m + torch.sub(z, m[:, None], out=buf).exp_().sum(-1).log()
            out[b, i : i + len(z)] = lse - z.gather(-1, input_ids[b, i + 1 : i + 1 + len(z), None])[:, 0]
    return out


def lm_dnll(clean_nll, ablated, batch, mask):
    """Per-token NLL increase; counted where both the predicting and the predicted token are valid."""
    return lse_nll(ablated, batch["input_ids"]) - clean_nll, mask[:, :-1] & mask[:, 1:]


def hidden_shift(clean, ablated, batch, mask):
    """Per-token 1 - cos between clean and ablated final hidden states."""
    return 1 - F.cosine_similarity(clean.float(), ablated.float(), dim=-1), mask


# metric -> (what of the clean output every ablation is compared with, computed once per batch; the metric)
_METRICS: dict[str, tuple[Reference, Metric]] = {
    "dnll": (lambda clean, batch: lse_nll(clean, batch["input_ids"]), lm_dnll),
    "shift": (lambda clean, batch: clean, hidden_shift),
}


def _groups(ablations: list[Ablation], size: int):
    """Chunks of at most `size` ablations, never spanning layers: a group restarts at its lowest layer,
    so each ablation then costs only the blocks from its own layer on (plan order kept: the resample
    draws come in the same order)."""
    by_layer: dict[int, list[Ablation]] = {}
    for ab in ablations:
        by_layer.setdefault(ab.layer, []).append(ab)
    for same in by_layer.values():
        yield from (same[i : i + size] for i in range(0, len(same), size))


def _start(group: list[Ablation], restartable: bool) -> int:
    """The layer a group's forward starts at: its lowest ablated layer, or 0 (a full forward)."""
    return min(ab.layer for ab in group) if restartable else 0


class AblationEffects:
    """Streams the effect of every ablation in `ablations` (one statistic per ablation name and layer)."""

    def __init__(
        self,
        forward: Callable[[dict], torch.Tensor],
        ablations: list[Ablation],
        n_layers: int,
        metric: str = "dnll",
        calib: Calibration | None = None,
        max_rows: int = 16,
        restart: Restart | None = None,
    ):
        """forward(batch) runs the model; with `restart`, forward(batch, share) also counts `share` forwards
        per row (restart.py)."""
        self.forward, self.ablations, self.calib, self.restart = forward, ablations, calib, restart
        self.metric_name, (self.reference, self.metric) = metric, _METRICS[metric]
        self.max_rows = max_rows
        names = dict.fromkeys(ab.name for ab in ablations)
        self.means = {f"ablation_{metric}_{n}": TokenMean(n_layers) for n in names}

    @torch.no_grad()
    def update(
        self, batch: dict, mask: torch.Tensor, clean: torch.Tensor | None = None, recorded: bool = False
    ) -> None:
        """mask (B, T) bool of tokens to count; `clean` is the unablated output if already computed, by a
        forward the restart recorded (`recorded`: the probe's stream, stream_ablations.py) or not (then no
        cache: every ablation re-runs in full)."""
        if not self.ablations:  # nothing asked for: not even the clean pass
            return
        restart = self.restart if clean is None or recorded else None
        with restart.recording() if restart and not recorded else nullcontext():
            clean = self._run(batch, 1.0) if clean is None else clean
        if restart:
            restart.self_check(self._run, batch)
        ref = self.reference(clean, batch)  # e.g. the clean NLL: once per batch, not once per ablation
        B = mask.shape[0]
        for group in self._schedule(B):
            out = self._ablated(batch, group, B, mask.shape[1], restart)
            for k, ab in enumerate(group):
                vals, m = self.metric(ref, out[k * B : (k + 1) * B], batch, mask)
                self.means[f"ablation_{self.metric_name}_{ab.name}"].add(ab.layer, vals, m)

    def _schedule(self, B: int):
        """The groups of ablations that share one forward on a batch of B rows."""
        return _groups(self.ablations, max(1, self.max_rows // B))

    def planned(
        self, B: int, first: bool, restartable: bool = True, fused: bool = False
    ) -> list[tuple[int, float]]:
        """(rows, share) of each forward update() runs on a batch of B rows (the first batch of the pass:
        `first`), with the restart usable or not, fused with the probe's stream or not: what the pass will
        count (importance/cost.py prints it before the run; tests/test_importance_cost_line.py holds it
        equal to the counted passes)."""
        if not self.ablations:
            return []
        share = self.restart.share if self.restart else (lambda l0: 1.0)
        last = self.restart and len(self.restart.layers) - 1
        check = first and restartable and bool(last)  # Restart.self_check, once: the last block alone
        clean = (B, self.restart.head) if fused else (B, 1.0)  # fused: the stream ran all but the head
        return [clean, *([(B, self.restart.block_share())] if check else [])] + [
            (len(g) * B, share(l0) if (l0 := _start(g, restartable)) else 1.0) for g in self._schedule(B)
        ]

    def _ablated(self, batch, group, B: int, T: int, restart: Restart | None) -> torch.Tensor:
        """The forward of `group` (batch repeated), from the lowest ablated layer where restartable."""
        l0 = _start(group, bool(restart and restart.usable()))
        state = self.calib.gen.get_state() if self.calib is not None else None
        starting = restart.from_layer(l0, len(group)) if l0 else nullcontext()
        try:
            with ablating(group, B, self.calib, T), starting:
                return self._run(repeat_batch(batch, len(group)), restart.share(l0) if l0 else 1.0)
        except Exception as e:
            if not l0:
                raise
            restart.refuse(f"restarted forward failed ({type(e).__name__}): full re-runs")
            if state is not None:  # the resample draws of the full re-run are the ones a restart would make
                self.calib.gen.set_state(state)
            return self._ablated(batch, group, B, T, restart)

    def _run(self, batch: dict, share: float) -> torch.Tensor:
        return self.forward(batch, share) if self.restart else self.forward(batch)

    def all_reduce_(self) -> None:
        for m in self.means.values():
            m.all_reduce_()

    def rows(self) -> dict[str, list[dict]]:
        return {name: m.rows() for name, m in self.means.items()}
