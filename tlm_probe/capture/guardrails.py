"""Checks that make a wrong adapter fail loudly instead of producing plausible nonsense.

Per block kind: which captured pieces must add up (before any LayerNorm), and which pieces are derived.
The sums are compared in float64 on counted tokens with a tolerance of a few units in the last place of
the model dtype, relative to the magnitudes of the terms: exact for a right adapter, far off for a wrong one.
"""

from __future__ import annotations

import functools
import operator

import torch

from tlm_probe.capture.adapters import MIXER_ONLY, PARALLEL, POST_LN, SEQUENTIAL
from tlm_probe.capture.finite import NonFiniteError as NonFiniteError  # re-exported: its old home
from tlm_probe.capture.finite import non_finite, refuse_non_finite
from tlm_probe.capture.rows import SEQUENTIAL_CROSS
from tlm_probe.errors import UserError


class GuardrailError(UserError):
    """The captured activations contradict the adapter (a hook never fired, pieces do not add up)."""


# kind -> [(piece, terms that must sum to it)]
ADDITIVITY = {
    SEQUENTIAL: [("resid_mid", ("resid_pre", "attn_out")), ("resid_post", ("resid_mid", "mlp_out"))],
    PARALLEL: [("resid_post", ("resid_pre", "attn_out", "mlp_out"))],
    POST_LN: [("attn_sum", ("resid_pre", "attn_out")), ("resid_post_prenorm", ("resid_mid", "mlp_out"))],
    MIXER_ONLY: [("resid_post", ("resid_pre", "attn_out"))],
    SEQUENTIAL_CROSS: [
        ("resid_mid", ("resid_pre", "self_attn_out", "cross_attn_out")),
        ("resid_post", ("resid_mid", "mlp_out")),
    ],
}
# kind -> the pieces statistics may read, where not all of them (a block without an MLP: block-level only)
AVAILABLE = {MIXER_ONLY: frozenset({"resid_pre", "resid_post"})}
NO_MLP = "the block has no MLP (and so no resid_mid): only block-level statistics (resid_pre, resid_post)"


def unavailable(kind: str, needs: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """statistic -> why it cannot be computed on this block kind, for statistics reading missing pieces."""
    allowed = AVAILABLE.get(kind)
    if allowed is None:
        return {}
    return {s: NO_MLP for s, pieces in needs.items() if not set(pieces) <= allowed}


# kind -> {derived piece: terms}: parallel blocks add the MLP output to resid_pre + attn_out; a decoder
# block with cross-attention writes two attention outputs before its MLP, and attn_out is what both add
DERIVED = {
    PARALLEL: {"resid_mid": ("resid_pre", "attn_out")},
    SEQUENTIAL_CROSS: {"attn_out": ("self_attn_out", "cross_attn_out")},
}
ULP_FACTOR = 8.0
SAMPLE_TOKENS = 256
"""Tokens per batch whose pieces the additivity check sums in float64 (a wrong tap is wrong everywhere)."""


def guardrail_pieces(kind: str) -> set[str]:
    return {p for lhs, terms in ADDITIVITY[kind] for p in (lhs, *terms)} - set(DERIVED.get(kind, {}))


# the layer output: its tap fires last in every block, so it is what tells a backend the layer is complete
_ALWAYS = {"resid_post"}


def capture_set(kind: str, needs: set[str]) -> set[str]:
    """Pieces to capture: what the statistics need (derived ones replaced by their terms), the guardrails'
    pieces, and the layer output (post-LN guardrails read the sum before the LayerNorm, not the output)."""
    derived = DERIVED.get(kind, {})
    needs = needs & AVAILABLE.get(kind, needs)  # the others were refused with their reason (unavailable)
    direct = {p for p in needs if p not in derived}
    for p in needs & set(derived):
        direct |= set(derived[p])
    return direct | guardrail_pieces(kind) | _ALWAYS


def add_derived(kind: str, raw: dict[str, torch.Tensor]) -> None:
    for name, terms in DERIVED.get(kind, {}).items():
        raw[name] = functools.reduce(operator.add, (raw[t] for t in terms))


CHECK_BYTES = 64 * 2**20
"""Most float64 bytes of sampled pieces gathered before their additivity rows are checked: on narrow
models every layer of a batch at once, on wide ones a group of layers at a time."""


def check_layer(kind: str, layer: int, raw: dict[str, torch.Tensor], counted, taps: dict) -> None:
    """Raise GuardrailError if the pieces of one layer do not add up on the sampled tokens; NonFiniteError
    when that is because a piece holds inf/NaN. counted: a (B, T) bool mask of the tokens to check."""
    checks = AdditivityChecks(kind, taps)
    checks.add(layer, raw, picker(counted))
    checks.check()


class AdditivityChecks:
    """The first batches' additivity check (ADDITIVITY[kind] on each layer's sampled tokens), gathered layer
    by layer and done for many layers at once: the samples stacked and made float64 once, every row of
    every layer one product with a matrix of +1 / -1. Measured in the stream of a 5 x 64 model (cold caches):
    ~1.0 ms a call this way, 2.95 ms layer by layer (~2% of a 3-batch call).

    check() raises for the first layer at fault (NonFiniteError when its sample holds inf/NaN; finiteness is
    not looked at otherwise: every token's is checked when the batch ends, StatSink.end_batch). Pieces of
    different shapes (a tap at a module of another width) are checked at once, row by row."""

    def __init__(self, kind: str, taps: dict, budget: int = CHECK_BYTES):
        self.kind, self.taps, self.budget = kind, taps, budget
        self._layers: list[int] = []
        self._picks: list[torch.Tensor] = []  # every gathered layer's sampled pieces, in self._key's order
        self._key: tuple | None = None  # (piece names, rows' lhs dtypes, sample shape, device) of those

    def add(self, layer: int, raw: dict[str, torch.Tensor], pick) -> None:
        """Gather one layer's pieces at the tokens `pick` (picker) takes."""
        names = tuple(raw)
        picks = [pick(raw[n]) for n in names]
        if any(p.shape != picks[0].shape for p in picks):
            self.check()
            _check_rows(self.kind, layer, raw, dict(zip(names, picks, strict=True)), self.taps)
            return
        dtypes = tuple(raw[lhs].dtype for lhs, _ in ADDITIVITY[self.kind])
        key = (names, dtypes, picks[0].shape, picks[0].device)  # a dispatched model: a group per device
        if key != self._key:
            self.check()
            self._key = key
        self._layers.append(layer)
        self._picks += picks
        if len(self._picks) * picks[0].numel() * 8 >= self.budget:
            self.check()

    def check(self) -> None:
        """Check every layer gathered, and forget them."""
        if not self._layers:
            return
        (layers, picks), (names, dtypes, shape, device) = (self._layers, self._picks), self._key
        self.clear()
        values = torch.empty(len(picks), *shape, dtype=torch.float64, device=device)
        values = torch.stack(picks, out=values).view(len(layers), len(names), -1)  # one copy, float64
        signs, terms, rows, tol = _sum_rows(self.kind, names, dtypes, device)
        err = (signs @ values).abs_()  # (layers, rows, values): lhs - sum(terms)
        size = terms @ values.abs_()  # in place: no second buffer of the samples (it cost more than the sums)
        ok = err <= size.mul_(tol).add_(1e-30)  # inf or NaN in a sum is not ok (0 * inf)
        if bool(ok.all()):
            return
        bad = ok.logical_not_()
        j = int(bad.flatten(1).any(1).nonzero()[0, 0])  # the first layer at fault
        _check_finite_pieces(layers[j], dict(zip(names, values[j], strict=True)))  # |values|: as finite
        i = int(bad[j].any(1).nonzero()[0, 0])
        lhs, parts = rows[i]
        _not_additive(layers[j], lhs, parts, float(err[j, i].max()), int(bad[j, i].sum()), self.taps)

    def clear(self) -> None:
        self._layers, self._picks = [], []


def _check_rows(kind: str, layer: int, raw: dict, picks: dict, taps: dict) -> None:
    """One layer, row by row: pieces that cannot be stacked (a tap at the wrong module) are named."""
    picked = {n: p.to(torch.float64) for n, p in picks.items()}
    _check_finite_pieces(layer, picked)
    for lhs, terms in ADDITIVITY[kind]:
        _check_sum(layer, lhs, terms, raw, picked, taps)


@functools.lru_cache(maxsize=64)
def _sum_rows(kind: str, names: tuple[str, ...], dtypes: tuple[torch.dtype, ...], device: torch.device):
    """(signs, terms, rows, tol) on `device` (the pieces'): row i of signs is +1 at its lhs and -1 at its
    terms, of terms 1 at its terms; rows are ADDITIVITY[kind], over the pieces in `names` order; tol (rows,
    1) is ULP_FACTOR units in the last place of each lhs's dtype (`dtypes`)."""
    rows = ADDITIVITY[kind]
    signs = torch.zeros(len(rows), len(names), dtype=torch.float64)
    terms = torch.zeros_like(signs)
    for i, (lhs, parts) in enumerate(rows):
        signs[i, names.index(lhs)] = 1
        for t in parts:
            signs[i, names.index(t)], terms[i, names.index(t)] = -1, 1
    tol = torch.tensor([[ULP_FACTOR * torch.finfo(d).eps] for d in dtypes], dtype=torch.float64)
    return signs.to(device), terms.to(device), rows, tol.to(device)


def _check_finite_pieces(layer: int, picked: dict[str, torch.Tensor]) -> None:
    refuse_non_finite((layer, name, x) for name, x in picked.items())


def picker(counted: torch.Tensor):
    """x -> x[counted] for (B, T, ...) pieces: the same rows in the same order, by an index_select on the
    flat positions found once (a boolean mask finds its positions again for every piece it indexes; this
    made the first batch's check ~1.3x slower). A piece of another shape is indexed by the mask itself,
    which raises as before."""
    flat = counted.reshape(-1).nonzero().squeeze(1)

    def pick(x: torch.Tensor) -> torch.Tensor:
        if x.shape[:2] != counted.shape:
            return x[counted]
        return x.reshape(counted.numel(), *x.shape[2:]).index_select(0, flat)

    return pick


def sample_counted(counted: torch.Tensor, k: int = SAMPLE_TOKENS) -> torch.Tensor:
    """(B, T) bool: every sequence's first counted token plus evenly spaced counted tokens, about k in all.

    The additivity check on all tokens made the first batch 1.2-1.5x a steady one; a tap at the wrong module
    breaks the sum at every token, so a sample catches it. First tokens are kept because position 0 is where
    models differ most (BOS, massive activations)."""
    flat = counted.reshape(-1).nonzero().squeeze(1)
    if flat.numel() <= k:
        return counted
    keep = torch.zeros(counted.numel(), dtype=torch.bool, device=counted.device)
    keep[flat[torch.linspace(0, flat.numel() - 1, k, device=counted.device).long()]] = True
    first = counted.int().argmax(1)  # right padding: the first counted position of each row
    rows = torch.arange(counted.shape[0], device=counted.device)
    keep.view_as(counted)[rows, first] |= counted[rows, first]
    return keep.view_as(counted)


def check_finite(squares: list[tuple[int, str, torch.Tensor]], index) -> None:
    """Once per batch: squares holds (layer, piece, (B, T) squared norms) for every piece of every layer (the
    statistics compute them anyway); a piece with inf/NaN has a non-finite squared norm. Names the first
    layer and piece at fault."""
    if not squares:
        return
    finite = torch.isfinite(index.select_last(torch.stack([sq for _, _, sq in squares]))).all(-1)
    if bool(finite.all()):
        return
    layer, name, _ = squares[int((~finite).nonzero()[0, 0])]
    raise non_finite(layer, name)


def _check_sum(layer: int, lhs: str, terms: tuple[str, ...], raw: dict, picked: dict, taps: dict):
    """picked: each piece's sampled tokens in float64 (check_layer)."""
    try:
        parts = [picked[t] for t in terms]
        total = picked[lhs]
        err = (total - sum(parts)).abs()
    except RuntimeError as e:  # shapes that cannot be added: a tap points at the wrong module
        raise GuardrailError(
            f"layer {layer}: {lhs} != {' + '.join(terms)} ({e}); taps {taps} are wrong"
        ) from e
    eps = torch.finfo(raw[lhs].dtype).eps
    tol = ULP_FACTOR * eps * sum(p.abs() for p in parts) + 1e-30
    bad = err > tol
    if bad.any():
        _not_additive(layer, lhs, terms, float(err.max()), int(bad.sum()), taps)


def _not_additive(layer: int, lhs: str, terms: tuple[str, ...], worst: float, count: int, taps: dict):
    raise GuardrailError(
        f"layer {layer}: captured {lhs} is not {' + '.join(terms)} (max error {worst:.3g} on "
        f"{count} values); the adapter's taps {taps} do not match this model"
    )
