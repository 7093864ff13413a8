"""The probe and its peers as zero-argument callables on one fixed batch, for benchmarks.timing.

Every arm computes the same alignment statistics through the same StatSink (only the capture differs),
and arms are compared only with arms that run the same part of the model (blocks only, or with the LM
head) at the same thread count.
"""

from __future__ import annotations

import contextlib
import time
import warnings

import torch

from tlm_probe.capture.adapters import split_tap
from tlm_probe.capture.native import NativeBackend, first_tensor, tap_input
from tlm_probe.capture.sink import StatSink
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.pieces import TokenIndex


def sink_for(pm) -> StatSink:
    return StatSink(pm, build_accumulators("alignment", pm.n_layers, pm.d_ff))


def forward(pm, ids, mask, full: bool, stream: int = 1):
    """`stream` plain forwards of the batch per call."""
    fwd = pm.forward if full else pm.forward_base

    def run():
        for _ in range(stream):
            fwd(ids, mask)

    return run


def native(pm, ids, mask, full: bool, stats_seconds: list | None = None, stream: int = 1):
    """tlm_probe's native backend; appends the seconds spent inside the statistics per call if asked (every
    layer's sink call, and the end of the batch, where the values of all layers are computed).
    stream > 1: that many batches per call under hooks registered once, as the probe's stream holds them
    (stream 1: registered and removed around the one batch, as a peer's hooks are)."""
    sink = sink_for(pm)
    backend = NativeBackend(sink)
    inner, spent = sink.on_layer, [0.0]

    def timed(layer, raw):
        t = time.perf_counter()
        inner(layer, raw)
        spent[0] += time.perf_counter() - t

    sink.on_layer = timed

    def batch():
        sink.start_batch(TokenIndex(mask))
        backend.run(ids, mask, full_output=full)
        t = time.perf_counter()
        sink.end_batch()
        spent[0] += time.perf_counter() - t

    def run():
        spent[0] = 0.0
        _streamed(backend, batch, stream)
        if stats_seconds is not None:
            stats_seconds.append(spent[0])

    return run


def hooks_only(pm, ids, mask, full: bool, stream: int = 1):
    """The native hooks with a sink that drops every piece: the cost of capturing alone."""
    sink = sink_for(pm)
    sink.on_layer = lambda layer, raw: None
    backend = NativeBackend(sink)

    def batch():
        sink.start_batch(TokenIndex(mask))
        backend.run(ids, mask, full_output=full)

    return lambda: _streamed(backend, batch, stream)


def _streamed(backend: NativeBackend, batch, stream: int) -> None:
    """`stream` batches; the hooks held across them when more than one (NativeBackend.held)."""
    with backend.held() if stream > 1 else contextlib.nullcontext():
        for _ in range(stream):
            batch()


def hand_hooks(pm, ids, mask, full: bool):
    """What a user writes by hand: forward hooks that keep every tap in a dict, statistics afterwards.
    The hooks are registered and removed around each call, as the native backend does."""
    sink = sink_for(pm)
    store: dict = {}

    def keep(key, where):
        if where == "in":
            return lambda m, a, k: store.__setitem__(key, tap_input(a, k))
        return lambda m, a, o: store.__setitem__(key, first_tensor(o))

    def register():
        handles = []
        for layer in range(pm.n_layers):
            for piece, tap in sink.taps.items():
                path, where = split_tap(tap)
                module = pm.layer_module(layer, path)
                fn = keep((layer, piece), where)
                if where == "in":
                    handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
                else:
                    handles.append(module.register_forward_hook(fn))
        return handles

    def run():
        store.clear()
        handles = register()
        try:
            (pm.forward if full else pm.forward_base)(ids, mask)
        finally:
            for h in handles:
                h.remove()
        _feed(sink, mask, {k: v.detach() for k, v in store.items()})

    return run


def _feed(sink: StatSink, mask, pieces: dict) -> None:
    sink.start_batch(TokenIndex(mask))
    for layer in range(sink.pm.n_layers):
        sink.on_layer(layer, {p: pieces[(layer, p)] for p in sink.pieces})
    sink.end_batch()


def tl_bridge(pm):
    from tlm_probe.capture.tl_backend import _build_bridge

    return _build_bridge(pm)


def tl_forward(bridge, ids, mask):
    return lambda: bridge(ids, attention_mask=mask)


def tl_cache_all(bridge, pm, ids, mask):
    """TransformerLens's default: run_with_cache caching every hook, then the statistics from the cache."""
    from tlm_probe.capture.tl_backend import TL_NAMES

    sink, names = sink_for(pm), TL_NAMES[pm.block_kind]

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, cache = bridge.run_with_cache(ids, attention_mask=mask)
        keys = [(l, p) for l in range(pm.n_layers) for p in sink.pieces]
        _feed(sink, mask, {(l, p): cache[f"blocks.{l}.{names[p]}"] for l, p in keys})

    return run


def tl_hooks(bridge, pm, ids, mask):
    """run_with_hooks on exactly the hooks the statistics need, keeping the tensors in a dict."""
    from tlm_probe.capture.tl_backend import TL_NAMES

    sink, names = sink_for(pm), TL_NAMES[pm.block_kind]
    store: dict = {}
    hooks = []
    for layer in range(pm.n_layers):
        for p in sink.pieces:
            keep = (lambda key: lambda t, hook: store.__setitem__(key, t))((layer, p))
            hooks.append((f"blocks.{layer}.{names[p]}", keep))

    def run():
        store.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=hooks)
        _feed(sink, mask, dict(store))

    return run


def nnsight_blocks(pm, ids, mask):
    """tlm_probe's nnsight backend (one trace over the blocks, saving only the needed taps)."""
    from tlm_probe.capture.nnsight_backend import NNsightBackend

    sink = sink_for(pm)
    backend = NNsightBackend(sink)

    def run():
        sink.start_batch(TokenIndex(mask))
        with torch.inference_mode():
            backend.run(ids, mask)
        sink.end_batch()

    return run
