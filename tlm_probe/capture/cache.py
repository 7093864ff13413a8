"""run_with_cache's capture: the named pieces (capture/names.py) of the asked layers of one forward pass.

The hooks are the probe's own (native.register_taps on the adapter's taps, attention.register_pattern),
so a piece here is the tensor the probe's statistics read: times the row's scale (Granite), a copy where
the model changes it in place after its hook (Falcon), (B, T, d) where a model flattens tokens (OPT),
derived pieces summed as the guardrails sum them. The cache is a plain dict keyed (name, layer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeAlias

import torch

from tlm_probe.capture.attention import eager_attention, register_pattern
from tlm_probe.capture.names import PATTERN, Source, sources
from tlm_probe.capture.native import register_taps
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.capture.sink import as_btd
from tlm_probe.errors import UserError

Key: TypeAlias = tuple[str, int]
"""(name, layer): a piece of one layer."""


class Cache(dict[Key, torch.Tensor]):
    """{(name, layer): tensor}: `cache["mlp_out", 5]` is (B, T, d); `cache["pattern", 0]` (B, H, T, T).

    Beside the pieces: `logits` (B, T, V) (None for an encoder), `loss` (the mean next-token NLL over the
    unpadded positions, None without logits), `input_ids` and `attention_mask` (B, T) of the run."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None
    input_ids: torch.Tensor | None
    attention_mask: torch.Tensor | None

    def __init__(self, pieces: Mapping[Key, torch.Tensor] | Iterable[tuple[Key, torch.Tensor]] = (),
                 *, logits: torch.Tensor | None = None, loss: torch.Tensor | None = None,
                 input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None) -> None:
        super().__init__(pieces)
        self.logits, self.loss = logits, loss
        self.input_ids, self.attention_mask = input_ids, attention_mask

    def __missing__(self, key: object) -> NoReturn:
        raise KeyError(f"{key!r} is not in this cache, which holds {self.names() or 'no piece'} at layers "
                       f"{self.layers() or 'none'}: give run_with_cache names= and layers= that include it")

    def names(self) -> list[str]:
        return list(dict.fromkeys(k[0] for k in self))

    def layers(self) -> list[int]:
        return sorted({k[1] for k in self})

    def stack(self, name: str) -> torch.Tensor:
        """(L, B, T, ...) the piece at every cached layer, in layer order."""
        if name not in self.names():
            self.__missing__((name, None))  # the missing piece's KeyError
        return torch.stack([self[name, layer] for layer in self.layers() if (name, layer) in self])

    def mean(self, name: str, layer: int) -> torch.Tensor:
        """(d,) the piece's mean over the run's unpadded tokens (the value a mean ablation writes)."""
        x = self[name, layer]
        mask = self.attention_mask.to(x.device).bool()
        return x[mask].to(torch.float64).mean(0).to(x.dtype)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in list(self.items())[:6])
        more = f", ... ({len(self)} in all)" if len(self) > 6 else ""
        loss = "None" if self.loss is None else f"{float(self.loss):.6g}"
        return f"Cache({{{shapes}{more}}}, loss={loss})"


def run_with_cache(pm: ProbeModel, ids: torch.Tensor, mask: torch.Tensor, names: tuple[str, ...],
                   layers: tuple[int, ...], device: str | torch.device | None = None,
                   dtype: torch.dtype | None = None, backend: str = "native") -> Cache:
    """One forward of the whole model on (ids, mask), keeping `names` at `layers` (checked by the caller,
    capture/names.py) moved to `device` and cast to `dtype` when given. backend: "native" (these hooks),
    or "nnsight" / "transformer-lens" (the probe's backends capture the pieces; logits from a plain
    forward for nnsight, which traces the blocks only)."""
    if backend != "native":
        return _through(backend, pm, ids, mask, names, layers, device, dtype)
    given, _ = sources(pm)
    direct = _direct(given, names)
    raw: dict[int, dict[str, torch.Tensor]] = {layer: {} for layer in layers}

    def keep(layer: int, piece: str, value: torch.Tensor | None) -> None:
        if value is None:
            raise UserError(f"layer {layer}: the {pm.family} row's tap for {piece} gave no tensor")
        value = value.detach()
        raw[layer][piece] = value.clone() if piece in pm.adapter.copy else value

    with contextlib.ExitStack() as stack:
        row = pm.taps()  # the terms of a derived piece may be taps of no contract name (T5's two attentions)
        taps = {p: given[p].tap if p in given else row[p] for p in direct if p != PATTERN}
        register_taps(pm, taps, keep, stack, layers=layers)
        if PATTERN in names:
            stack.enter_context(eager_attention(pm))
            register_pattern(pm, lambda layer, p: _when(layer in raw, keep, layer, PATTERN, p), stack)
        with torch.no_grad():
            out = pm.forward(ids, mask)
    return _cache(pm, given, raw, pm.scales, (ids, mask, out), names, (device, dtype))


def _cache(pm, given, raw: dict, scales: dict, run: tuple, names, move: tuple) -> Cache:
    """The Cache of one run = (ids, mask, model output) from its captured tensors raw[layer][piece]."""
    ids, mask, out = run
    B, T = ids.shape
    cache = Cache(input_ids=ids, attention_mask=mask)
    for layer, captured in raw.items():
        pieces = _finish(given, captured, scales, B, T)
        cache.update({(n, layer): _moved(pieces[n], *move) for n in names})
    cache.logits = logits_of(out) if pm.is_causal else None  # an encoder: its hidden states, no logits
    cache.loss = next_token_loss(cache.logits, ids, mask)
    if cache.logits is not None:
        cache.logits = _moved(cache.logits.detach(), *move)
    return cache


class _Collect:
    """What a probe backend delivers to (the StatSink's interface): every layer's pieces, kept."""

    pattern = None

    def __init__(self, pm, pieces: set[str]):
        self.pm, self.pieces, self.scales = pm, sorted(pieces), dict(pm.scales)  # a backend may clear scales
        self.taps = {p: pm.taps()[p] for p in self.pieces}
        self.raw: dict[int, dict[str, torch.Tensor]] = {}

    def on_layer(self, layer: int, raw: dict[str, torch.Tensor]) -> None:
        self.raw[layer] = {k: v.detach() for k, v in raw.items()}


def _through(backend: str, pm, ids, mask, names, layers, device, dtype) -> Cache:
    from tlm_probe.capture.backends import BACKENDS

    given, _ = sources(pm)
    unserved = [n for n in names if n in ("mlp_in", PATTERN)]
    if unserved:
        raise UserError(f"run_with_cache: {unserved[0]} is native only (backends: {', '.join(BACKENDS)})")
    sink = _Collect(pm, _direct(given, names) | {"resid_post"})
    with torch.no_grad():
        out = BACKENDS.get(backend)(sink).run(ids, mask, full_output=True)
        out = pm.forward(ids, mask) if out is None else out
    raw = {layer: sink.raw[layer] for layer in layers}
    return _cache(pm, given, raw, sink.scales, (ids, mask, out), names, (device, dtype))


def _when(condition: bool, fn, *args) -> None:
    """fn(*args) if condition; returns None, as a forward hook must (any other value replaces the output)."""
    if condition:
        fn(*args)


def _direct(given: dict[str, Source], names) -> set[str]:
    """The tapped pieces the asked names need (a derived name's terms, an alias's piece)."""
    need: set[str] = set()
    for name in names:
        source = given[name]
        need |= set(source.terms) if source.terms else {source.same_as or name}
    return need


def _finish(given: dict[str, Source], raw: dict[str, torch.Tensor], scales: dict, B: int, T: int) -> dict:
    """One layer's captured tensors as the contract's pieces: (B, T, ...), scaled, derived, aliased."""
    pieces = {k: as_btd(v, B, T) * scales[k] if k in scales else as_btd(v, B, T) for k, v in raw.items()}
    for name, source in given.items():
        if source.terms and all(t in pieces for t in source.terms):
            pieces[name] = sum(pieces[t] for t in source.terms)
        elif source.same_as in pieces:
            pieces[name] = pieces[source.same_as]
    return pieces


def _moved(x: torch.Tensor, device, dtype) -> torch.Tensor:
    return x if device is None and dtype is None else x.to(device=device, dtype=dtype)


def logits_of(out: Any) -> torch.Tensor | None:
    """The logits of a causal LM's output (ours returns them bare), None for an encoder's hidden states."""
    if isinstance(out, torch.Tensor):
        return out
    return getattr(out, "logits", None)


def next_token_loss(logits: torch.Tensor | None, ids: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor | None:
    """Mean NLL (float64 sum, in nats) of each next token whose position and predecessor are unpadded."""
    if logits is None or logits.shape[:2] != ids.shape:
        return None
    pairs = (mask[:, 1:] * mask[:, :-1]).bool()
    if not bool(pairs.any()):
        return None
    logp = torch.log_softmax(logits[:, :-1].to(torch.float64), dim=-1)
    nll = -logp.gather(-1, ids[:, 1:, None].to(logp.device))[..., 0]
    return nll[pairs.to(nll.device)].mean()
