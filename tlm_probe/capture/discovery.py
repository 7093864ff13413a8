"""Discovery: a candidate adapter row for a model type the table lacks, inferred from the module tree and
one traced forward pass, then proved on the loaded model (verify.py) before any statistic is computed.

What is inferred, and from what:
- the blocks: the ModuleList under the base model with config's layer count whose block has an MLP child
  (named mlp / feed_forward / ffn / mlp_block) and an attention child;
- inside layer 0, from the order and data flow of its direct children in one forward pass: the norm whose
  output the MLP reads (its input is resid_mid; none: the MLP reads the stream itself), a norm that reads
  the MLP's (or the attention's) output (a sandwich norm: its output is what is added to the stream), and
  the down projection (the Linear / Conv1D inside the MLP whose output is the MLP's output);
- the final norm (the norm outside the blocks that reads the last block's output) and the head.
Candidate layouts (sequential, parallel) are tried in the order the data flow suggests; the first one the
invariants prove is used, with one line saying so. Post-LN blocks, mixtures of experts and residual
multipliers are not inferred: their candidates fail the invariants and the model is refused with which
invariant failed by how much.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch
from torch import nn

from tlm_probe.capture.rows import PARALLEL, SEQUENTIAL, Adapter, fixed
from tlm_probe.capture.verify import VerificationError, probe_ids, verify
from tlm_probe.errors import UserError

MLP_NAMES = ("mlp", "feed_forward", "ffn", "mlp_block")
ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention", "mixer")
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


class DiscoveryError(UserError):
    """No candidate row could be inferred, or none passed the invariants."""


def _same(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and (a is b or (a.shape == b.shape and torch.equal(a, b)))
    )


def _first(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return getattr(value, "last_hidden_state", None)


def _line(e: Exception) -> str:
    return (str(e).strip() or type(e).__name__).splitlines()[0][:300]


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _is_linear(module: nn.Module) -> bool:
    """nn.Linear or GPT-2's Conv1D (a 2-D weight applied to the last dimension)."""
    weight = getattr(module, "weight", None)
    return isinstance(module, nn.Linear) or (type(module).__name__ == "Conv1D" and weight is not None)


def _layer_count(config) -> int:
    for key in LAYER_COUNT_KEYS:
        if isinstance(getattr(config, key, None), int):
            return int(getattr(config, key))
    raise DiscoveryError(f"cannot discover a row: the config has none of {', '.join(LAYER_COUNT_KEYS)}")


def _child_named(module: nn.Module, names: tuple[str, ...]) -> str | None:
    children = dict(module.named_children())
    return next((n for n in names if n in children), None)


def find_layers(base: nn.Module, config) -> str:
    """Path (relative to the base model) of the ModuleList of blocks."""
    n = _layer_count(config)
    for path, module in base.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) != n or not path:
            continue
        if _child_named(module[0], MLP_NAMES) and _child_named(module[0], ATTN_NAMES):
            return path
    raise DiscoveryError(
        f"cannot discover a row: no ModuleList of {n} blocks (config's layer count) whose block has an "
        f"MLP child ({'/'.join(MLP_NAMES)}) and an attention child ({'/'.join(ATTN_NAMES)})"
    )


class _Trace:
    """One forward pass, recording each call of the watched modules: (name, first input, first output)."""

    def __init__(self, watched: dict[str, nn.Module]):
        self.calls: list[tuple[str, torch.Tensor | None, torch.Tensor | None]] = []
        self.handles = [
            m.register_forward_hook(self._hook(name), with_kwargs=True) for name, m in watched.items()
        ]

    def _hook(self, name):
        def hook(module, args, kwargs, out):
            x = _first(args) if args else _first(list(kwargs.values()))
            self.calls.append((name, x, _first(out)))

        return hook

    def run(self, model: nn.Module, ids: torch.Tensor) -> None:
        try:
            with torch.no_grad():
                model(input_ids=ids, attention_mask=torch.ones_like(ids))
        except Exception as e:  # a model that needs other inputs: one line, not a traceback
            raise DiscoveryError(
                f"cannot discover a row: a forward pass on token ids failed: {_line(e)}"
            ) from e
        finally:
            for h in self.handles:
                h.remove()

    def once(self, name: str):
        hits = [c for c in self.calls if c[0] == name]
        return hits[0] if len(hits) == 1 else None


def _norm_around(trace: _Trace, norms: list[str], target: str, reads: str) -> str | None:
    """The norm (called exactly once) whose output is the target's input (reads="output" of the norm is
    read by target) or whose input is the target's output (reads="target")."""
    call = trace.once(target)
    if call is None:
        return None
    for name in norms:
        n = trace.once(name)
        if n is not None and _same(
            n[2] if reads == "output" else n[1], call[1] if reads == "output" else call[2]
        ):
            return name
    return None


def _layer_structure(model, base, layers_path: str, ids) -> dict:
    """Names inside layer 0 (and the final norm) from one traced forward pass."""
    layers = base.get_submodule(layers_path)
    layer0 = layers[0]
    mlp, attn = _child_named(layer0, MLP_NAMES), _child_named(layer0, ATTN_NAMES)
    children = dict(layer0.named_children())
    norms = [n for n, m in children.items() if _is_norm(m)]
    inner = {f"{mlp}.{n}": m for n, m in children[mlp].named_modules() if n and _is_linear(m)}
    outside = {
        f"final:{p}": m
        for p, m in base.named_modules()
        if _is_norm(m) and not p.startswith(layers_path + ".") and p
    }
    watched = {**children, **inner, **outside, "last_layer": layers[len(layers) - 1]}
    trace = _Trace(watched)
    trace.run(model, ids)
    mlp_call, attn_call, last = trace.once(mlp), trace.once(attn), trace.once("last_layer")
    if mlp_call is None or attn_call is None:
        raise DiscoveryError(f"cannot discover a row: layer 0's {mlp} or {attn} did not run exactly once")
    down = next((n for n in inner if (c := trace.once(n)) and _same(c[2], mlp_call[2])), None)
    final = next(
        (p[len("final:") :] for p in outside if (c := trace.once(p)) and last and _same(c[1], last[2])), None
    )
    return {
        "mlp": mlp,
        "attn": attn,
        "down": down,
        "pre_mlp_norm": _norm_around(trace, norms, mlp, "output"),
        "post_mlp_norm": _norm_around(trace, norms, mlp, "target"),
        "post_attn_norm": _norm_around(trace, norms, attn, "target"),
        "parallel_hint": _same(mlp_call[1], attn_call[1]),
        "final_norm": final,
    }


def _candidates(s: dict) -> list[tuple[str, dict[str, str]]]:
    """(block kind, taps) in the order the data flow suggests."""
    attn_out = f"{s['post_attn_norm'] or s['attn']}:out"
    mlp_out = f"{s['post_mlp_norm'] or s['mlp']}:out"
    common = {"resid_pre": ":in", "attn_out": attn_out, "mlp_out": mlp_out, "resid_post": ":out"}
    common["mlp_post"] = f"{s['down']}:in"
    resid_mid = f"{s['pre_mlp_norm'] or s['mlp']}:in"
    seq = (SEQUENTIAL, {**common, "resid_mid": resid_mid})
    par = (PARALLEL, common)
    return [par, seq] if s["parallel_hint"] else [seq, par]


def _head_path(model: nn.Module) -> str | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return next((n for n, m in model.named_modules() if m is head), None) if head is not None else None


def _describe(kind: str, layers: str, n: int, block: str, taps: dict, errors: dict) -> str:
    found = ", ".join(f"{k} {v}" for k, v in taps.items())
    proved = ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
    return (
        f"discovered (not in the table): {n} x {block} at {layers!r}, {kind} blocks; taps: {found}; "
        f"proved by the invariants (max error / tolerance: {proved})"
    )


def discover(model: nn.Module, config, wrap) -> Adapter:
    """A row for `model`, proved on it; `wrap(model, adapter)` builds the ProbeModel verify() runs on."""
    model_type = getattr(config, "model_type", None)
    base = getattr(model, "base_model", model)
    ids = probe_ids(config).to(next(model.parameters()).device)
    layers = find_layers(base, config)
    s = _layer_structure(model, base, layers, ids)
    if s["down"] is None:
        raise DiscoveryError(
            f"cannot discover a row for {model_type!r}: invariant mlp_out = down_proj(mlp_post) fails: no "
            f"Linear inside layer 0's {s['mlp']} gives the MLP's output (a mixture of experts, or an MLP "
            "that adds more after its last projection): add a row (--adapter ROW.json)"
        )
    failures = []
    for kind, taps in _candidates(s):
        row = Adapter(
            f"{model_type} (discovered)",
            (model_type,),
            layers=layers,
            mlp=s["mlp"],
            mlp_down=s["down"],
            final_norm=s["final_norm"],
            lm_head=_head_path(model),
            taps={kind: taps},
            kind_of=fixed(kind),
            origin="discovered",
        )
        try:
            errors, head_problem = verify(wrap(model, row), ids)
        except VerificationError as e:
            failures.append(f"as {kind} blocks: {e}")
            continue
        block = type(base.get_submodule(layers)[0]).__name__
        notes = _describe(kind, layers, len(base.get_submodule(layers)), block, taps, errors)
        row = replace(row, notes=notes, head_transform=fixed(head_problem) if head_problem else None)
        print(
            f"tlm: no adapter row for model_type {model_type!r}: using an inferred one. {notes}",
            file=sys.stderr,
        )
        return row
    raise DiscoveryError(
        f"cannot probe {model_type!r}: the row inferred from its module tree fails the invariants "
        f"({'; '.join(failures)}); add a row (--adapter ROW.json)"
    )
