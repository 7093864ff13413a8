"""Logit lens (nostalgebraist 2020): decode each layer's residual stream with the model's own final norm
and unembedding, and compare with the model's final prediction.

Per layer, token means of: KL(P_final || P_layer) (`logit_lens_kl`), cross-entropy on the next token
(`logit_lens_ce`), entropy of P_layer (`logit_lens_entropy`) and agreement of the top-1 token with the
final top-1 (`logit_lens_top1`). At the last layer the lens is the model itself: KL 0, agreement 1.

The (B, T, V) logits are the lens's cost at a large vocabulary (issue 24: 62% of its time went to
vocabulary-wide elementwise passes, not to the unembedding matmul), so every statistic is read off one
max, one exp, one sum and two dot products per token and layer, through the log-sum-exp identities
    log p = z - lse,  lse = m + log sum exp(z - m),  m = max z
    KL(q || p) = sum q log q - sum q z + lse,  H(p) = lse - sum p z,  CE = lse - z[next]
(sum q log q is computed once per batch from the final logits). `positions > 0` decodes only a seeded
sample of that many positions per sequence (the same positions in every sequence, drawn from T and the
seed alone): the (B, T, V) work shrinks by positions / T, and provenance records which ones. Only the
counted tokens (no padding) are unembedded, in chunks (CHUNK_ELEMENTS).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from tlm_probe.importance.streaming import TokenMean
from tlm_probe.statistic_names import LENS_STATS
from tlm_probe.stats.workspace import Workspace


def sampled_positions(T: int, k: int, seed: int) -> torch.Tensor | None:
    """Sorted positions the lens decodes in sequences of length T: k of them drawn without replacement
    with a generator seeded by `seed` (None: all T, when k is 0 or not below T)."""
    if k <= 0 or k >= T:
        return None
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    return perm[:k].sort().values


def decoded_share(pos: torch.Tensor | None, T: int) -> float:
    """The share of a row's T positions the lens decodes (pos: sampled_positions; None: all)."""
    return 1.0 if pos is None else len(pos) / T


CHUNK_ELEMENTS = 1 << 22
"""Tokens are decoded in chunks of about this many logits (16 MiB in float32): the elementwise passes
then run on a block that was just written instead of streaming a (B, T, V) tensor through memory
(measured on a 32k vocabulary: 1.26x the unembedding matmul for the max/exp/sum in chunks of 128 tokens,
1.80x on the whole tensor), and the lens holds a chunk, not the batch's logits, per layer."""


class _Final:
    """The model's own prediction at the decoded tokens (the counted ones at the decoded positions),
    computed once per batch: q (N, V), sum q log q (N,) and the top-1 token (N,)."""

    def __init__(self, logits: torch.Tensor, pos: torch.Tensor | None, keep: torch.Tensor):
        z = _lens_dtype(_kept_rows(logits if pos is None else logits[:, pos], keep))  # (N, V)
        logq = torch.log_softmax(z, -1)
        self.pos, self.keep = pos, keep
        self.q = logq.exp()
        self.q_logq = torch.mul(self.q, logq, out=logq).sum(-1)  # -H(q)
        self.top = z.argmax(-1)
        self.bytes = 2 * z.numel() * z.element_size()


def _kept_rows(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """x[keep] for x (B, T, ...) and keep (B, T) bool: where every token is kept, the same rows in the same
    order as a view (a (B, T, V) copy of the logits saved: 0.1 s per 8 x 256 batch at a 32k vocabulary)."""
    return x.flatten(0, 1) if bool(keep.all()) else x[keep]


def _lens_dtype(z: torch.Tensor) -> torch.Tensor:
    """float32 for the vocabulary-wide sums (bf16/fp16 logits would lose the KL), float64 kept."""
    return z if z.dtype == torch.float64 else z.float()


def _successors(input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) next token of each position and whether it is a counted one (False at the last position)."""
    ok = torch.zeros_like(mask)
    ok[:, :-1] = mask[:, :-1] & mask[:, 1:]
    nxt = torch.zeros_like(input_ids)
    nxt[:, :-1] = input_ids[:, 1:]
    return nxt, ok


class LogitLens:
    """Accumulates the four lens statistics for `n_layers` layers (on `positions` sampled positions per
    sequence, or all of them when positions is 0)."""

    def __init__(
        self, n_layers: int, final_norm: Callable, unembed: Callable, positions: int = 0, seed: int = 0
    ):
        self.final_norm, self.unembed = final_norm, unembed
        self.positions, self.seed = int(positions), int(seed)
        self.means = {name: TokenMean(n_layers) for name in LENS_STATS}
        self.scratch = Workspace()  # (B, T', V) buffer reused by every layer and batch: fresh ones cost
        # page faults on hundreds of megabytes each (the vocabulary is wide)
        self.seconds = 0.0  # wall time spent in the lens (its cost, printed in the probe's summary)
        self.peak_bytes = 0  # its largest working set: the final q, log q and the per-layer (B, T', V)
        self.decoded: dict[int, list[int] | None] = {}  # sequence length -> decoded positions (None: all)
        self.decoded_rows = 0.0  # rows x the share of their positions decoded (for the pass count)
        self.batch_rows = 0.0  # the same, of the last batch

    @torch.no_grad()
    def final(self, final_logits: torch.Tensor, mask: torch.Tensor | None = None) -> _Final:
        """The model's own prediction at the decoded tokens: computed once per batch, used per layer.
        mask (B, T): the tokens that count (None: all); update() must get the same mask."""
        t = time.perf_counter()
        B, T = final_logits.shape[:2]
        pos = sampled_positions(T, self.positions, self.seed)
        self.decoded.setdefault(T, None if pos is None else pos.tolist())
        self.batch_rows = B * decoded_share(pos, T)
        self.decoded_rows += self.batch_rows
        pos = None if pos is None else pos.to(final_logits.device)
        mask = torch.ones(B, T, dtype=torch.bool, device=final_logits.device) if mask is None else mask.bool()
        out = _Final(final_logits, pos, mask if pos is None else mask[:, pos])
        self.seconds += _elapsed(t, final_logits)
        return out

    @torch.no_grad()
    def update(self, layer: int, resid: torch.Tensor, final, input_ids, mask) -> None:
        """resid (B, T, d) at the layer's output, final = self.final(logits (B, T, V), mask), mask (B, T)
        of tokens to count. Cross-entropy uses the next token: it averages over tokens with a real
        successor. Only counted tokens at decoded positions are unembedded, `CHUNK_ELEMENTS` logits at a
        time."""
        mask = mask.bool()
        final = final if isinstance(final, _Final) else self.final(final, mask)
        t = time.perf_counter()
        nxt, nxt_ok = _successors(input_ids, mask)
        if final.pos is not None:
            resid, mask, nxt, nxt_ok = (x[:, final.pos] for x in (resid, mask, nxt, nxt_ok))
        keep = final.keep
        if not torch.equal(keep, mask):
            raise ValueError("LogitLens.update: mask differs from the one given to final()")
        values = self._decode(resid[keep], final, nxt[keep])  # each (N,)
        for name, v in values.items():
            full = torch.zeros(mask.shape, dtype=v.dtype, device=v.device)
            full[keep] = v
            self.means[name].add(layer, full, nxt_ok if name == "logit_lens_ce" else mask)
        self.seconds += _elapsed(t, resid)

    def _decode(self, h: torch.Tensor, final: _Final, nxt: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per decoded token (h: (N, d)): KL, entropy, top-1 agreement and CE, a chunk of tokens at a time."""
        step = max(1, CHUNK_ELEMENTS // final.q.shape[-1])
        parts: list[tuple[torch.Tensor, ...]] = []
        for i in range(0, h.shape[0], step):
            z = _lens_dtype(self.unembed(self.final_norm(h[None, i : i + step]))[0])  # (n, V)
            part = slice(i, i + step)
            parts.append(self._chunk(z, final.q[part], final.q_logq[part], final.top[part], nxt[part]))
            self.peak_bytes = max(self.peak_bytes, final.bytes + 3 * z.numel() * z.element_size())
        if not parts:
            return {name: h.new_zeros(0, dtype=final.q.dtype) for name in LENS_STATS}
        return {name: torch.cat(col) for name, col in zip(LENS_STATS, zip(*parts, strict=True), strict=True)}

    def _chunk(self, z, q, q_logq, top, nxt) -> tuple[torch.Tensor, ...]:
        """(kl, ce, entropy, top1) of logits z (n, V), in LENS_STATS order, by the log-sum-exp identities.
        Top-1 agreement is "the final top token attains the lens's maximum": the same as comparing argmaxes
        wherever the lens's maximum is unique, at a third of argmax's cost (a max and a gather)."""
        m = z.amax(-1)
        e = torch.sub(z, m[:, None], out=self.scratch.get("exp", z.shape, z)).exp_()  # exp(z - m)
        s = e.sum(-1)
        lse = m + s.log()
        prod = self.scratch.get("prod", z.shape, z)
        kl = q_logq - torch.mul(q, z, out=prod).sum(-1) + lse
        entropy = lse - torch.mul(e, z, out=prod).sum(-1) / s
        top1 = (z.gather(-1, top[:, None])[:, 0] >= m).double()
        ce = lse - z.gather(-1, nxt[:, None])[:, 0]
        return kl, ce, entropy, top1

    def provenance(self) -> dict:
        """Which positions were decoded (per sequence length seen) and the lens's own cost."""
        sampled = {T: p for T, p in self.decoded.items() if p is not None}
        return {
            "positions": "all" if not sampled else f"{self.positions} per sequence, seed {self.seed}",
            "decoded_positions": {str(T): p for T, p in sampled.items()},
            "seconds": round(self.seconds, 4),
            "peak_bytes": int(self.peak_bytes),
        }

    def all_reduce_(self) -> None:
        for m in self.means.values():
            m.all_reduce_()

    def rows(self) -> dict[str, list[dict]]:
        return {name: m.rows() for name, m in self.means.items()}


def _elapsed(t: float, like: torch.Tensor) -> float:
    if like.is_cuda:  # kernels run asynchronously: the lens's time is only known once they are done
        torch.cuda.synchronize(like.device)
    return time.perf_counter() - t
