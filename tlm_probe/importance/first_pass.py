"""The importance pass's clean forward: one forward per batch feeds every streaming and sampled part the
asked statistics need (and only those: their rows' needs in statistic_names.STATISTICS)."""

from __future__ import annotations

import torch

from tlm_probe.importance.geometry import AngularDistance, Anisotropy
from tlm_probe.importance.linear_probes import next_token_labels
from tlm_probe.importance.logit_lens import LogitLens
from tlm_probe.importance.sample import TokenSample
from tlm_probe.importance.utilisation import NeuronActivity
from tlm_probe.stats.reduce import all_reduce_


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B,) position of the last real token (works for left and right padding)."""
    pos = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.bool() * (pos + 1)).argmax(-1)


def has_lens(pm, need: frozenset[str]) -> bool:
    """The first pass decodes every layer with the logit lens (a causal LM with a head, and asked)."""
    return "lens" in need and pm.is_causal and pm.lm_head() is not None


class FirstPass:
    def __init__(self, pm, opts, need: frozenset[str]):
        L = pm.n_layers
        self.pm, self.opts, self.need = pm, opts, need
        self.angular = AngularDistance(L + 1) if "angular" in need else None
        self.angular_last = AngularDistance(L + 1) if "angular_last" in need else None
        self.anisotropy = Anisotropy(L + 1, pm.d_model) if "anisotropy" in need else None
        self.sample = TokenSample(opts.sample_size, opts.seed)
        self.neurons = [NeuronActivity(w, opts.act_threshold) for w in pm.d_ff] if "neurons" in need else []
        norm = pm.final_norm() or torch.nn.Identity()
        lens = has_lens(pm, need)
        self.lens = LogitLens(L, norm, pm.lm_head(), opts.lens_positions, opts.seed) if lens else None
        self.label_counts = torch.zeros(pm.vocab_size, dtype=torch.float64)
        self.captured_bytes = 0  # the largest batch's captured streams + logits (the lens's memory share)

    @property
    def needs_output(self) -> bool:
        return self.lens is not None

    @property
    def needs_resid(self) -> bool:
        return bool(self.need & {"lens", "angular", "angular_last", "anisotropy", "sample"})

    def labels(self, batch: dict, mask: torch.Tensor) -> torch.Tensor:
        if self.opts.probe_labels is not None:
            return self.opts.probe_labels(batch["input_ids"]).to(mask.device).long().masked_fill(~mask, -1)
        return next_token_labels(batch["input_ids"], mask)

    def _count(self, labels: torch.Tensor) -> None:
        ok = labels[labels >= 0].cpu()
        counts = torch.bincount(ok, minlength=len(self.label_counts)).double()
        if len(counts) > len(self.label_counts):  # user labels beyond the vocabulary
            counts[: len(self.label_counts)] += self.label_counts
            self.label_counts = counts
        else:
            self.label_counts += counts

    @torch.no_grad()
    def update(self, store: dict, out: torch.Tensor | None, batch: dict, mask: torch.Tensor) -> None:
        """store: the capture of this forward; out: logits (when the lens asked); mask: tokens to count."""
        if self.needs_resid:
            held = [t for t in store["resid"] if t is not None] + ([out] if out is not None else [])
            self.captured_bytes = max(self.captured_bytes, sum(t.numel() * t.element_size() for t in held))
            self._resid(store, out, batch, mask)
        for acc, post in zip(self.neurons, store["post"], strict=False):
            acc.update(post.reshape(*mask.shape, -1)[mask])

    def _resid(self, store: dict, out, batch: dict, mask: torch.Tensor) -> None:
        reps = torch.stack(store["resid"])  # (L+1, B, T, d)
        flat = reps[:, mask]  # (L+1, N, d)
        for acc in (self.angular, self.anisotropy):
            if acc is not None:
                acc.update(flat)
        if self.angular_last is not None:
            last = last_token_index(batch["attention_mask"])
            self.angular_last.update(reps[:, torch.arange(reps.shape[1]), last])  # (L+1, B, d)
        if "sample" in self.need:
            labels = self.labels(batch, mask)
            self._count(labels)
            groups = batch.get("seq_index")
            self.sample.update(list(store["resid"]), mask, labels, groups)  # r = 0..L, like the matrices
        if self.lens is not None:
            final = self.lens.final(out, mask)
            for l in range(self.pm.n_layers):
                self.lens.update(l, store["resid"][l + 1], final, batch["input_ids"], mask)

    def lens_cost(self, seconds: float) -> dict:
        """The lens's positions and cost: its time over the whole importance pass's `seconds`, its largest
        working set over the first pass's (captured streams and logits of a batch + the lens's buffers)."""
        info = self.lens.provenance()
        peak = info["peak_bytes"]
        info["time_share"] = round(info["seconds"] / seconds, 4) if seconds > 0 else float("nan")
        info["memory_share"] = round(peak / (peak + self.captured_bytes), 4) if peak else 0.0
        return info

    def all_reduce_(self) -> None:
        """Merge ranks: every streamed part is a sum (the token sample is refused under torchrun)."""
        for acc in (self.angular, self.angular_last, self.anisotropy):
            if acc is not None:
                acc.all_reduce_()
        for acc in self.neurons:
            acc.all_reduce_()
        if self.lens is not None:
            self.lens.all_reduce_()
        all_reduce_(self.label_counts)
