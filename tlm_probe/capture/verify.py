"""Proof of a discovered adapter row on the loaded model, by paths the taps do not take.

Each block is re-run on the arguments it received, with the tapped sublayer's contribution zeroed (the
module whose output the row says is added to the stream): what the block then returns is the stream that
contribution is added to, so a tap one norm off, a missing residual multiplier or a module that adds the
residual itself disagrees. Also: the blocks' inputs and outputs are the model's own output_hidden_states,
the down projection applied to the tapped neuron activity gives the MLP's output, and the final norm + head
of the last block's output give the logits (where not, the logit lens is refused, not the row).

Tolerance: the re-run repeats the same operations on the same inputs, so the only difference is the
rounding of one subtraction (post - mid vs the tapped mlp_out): at most one float eps times the magnitude
of the terms. _FACTOR = 16 leaves room for other kernels; a wrong tap is off by the size of a sublayer's
output (Granite's multiplier 0.5: half of it), ~1e6 times more in float32.
"""

from __future__ import annotations

import contextlib

import torch

from tlm_probe.capture.native import first_tensor, register_taps
from tlm_probe.capture.rows import PARALLEL, SEQUENTIAL, split_tap
from tlm_probe.errors import UserError

_FACTOR = 16.0
_PROBE_TOKENS = 16
_SEED = 0


class VerificationError(UserError):
    """An invariant failed: the message names it, the layer and by how much."""


def probe_ids(config) -> torch.Tensor:
    """(1, T) token ids, fixed by a seed: random ids exercise every block as real text does."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    length = min(_PROBE_TOKENS, int(limit)) if limit else _PROBE_TOKENS
    gen = torch.Generator().manual_seed(_SEED)
    return torch.randint(0, int(config.vocab_size), (1, length), generator=gen)


def _line(e: Exception) -> str:
    return (str(e).strip() or type(e).__name__).splitlines()[0][:300]


def _zero(module, args, out):
    if isinstance(out, torch.Tensor):
        return torch.zeros_like(out)
    return (torch.zeros_like(out[0]), *out[1:])


class _Record:
    """Per layer: the call (args, kwargs), the taps' values and the MLP module's output, in one forward."""

    def __init__(self, pm, ids: torch.Tensor):
        self.pm, self.calls, self.taps, self.mlp = pm, {}, {}, {}
        with contextlib.ExitStack() as stack, torch.no_grad():
            register_taps(pm, pm.taps(), lambda l, p, x: self.taps.setdefault(l, {}).update({p: x}), stack)
            for l in range(pm.n_layers):
                pre = pm.layer(l).register_forward_pre_hook(self._call(l), with_kwargs=True)
                post = pm.mlp(l).register_forward_hook(self._mlp(l))
                stack.callback(pre.remove)
                stack.callback(post.remove)
            mask = torch.ones_like(ids)
            try:
                self.out = pm.model(
                    input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False
                )
            except Exception as e:  # e.g. a tap hook on a module whose output is not a tensor
                raise VerificationError(f"the forward pass with the taps failed: {_line(e)}") from e

    def _call(self, l):
        return lambda m, args, kwargs: self.calls.setdefault(l, (args, kwargs))

    def _mlp(self, l):
        return lambda m, args, out: self.mlp.setdefault(l, first_tensor(out))

    def rerun(self, l: int, zero: str) -> torch.Tensor:
        """Layer l's output on its recorded arguments with the module at `zero` returning zeros."""
        args, kwargs = self.calls[l]
        handle = self.pm.layer_module(l, zero).register_forward_hook(_zero)
        try:
            with torch.no_grad():
                return first_tensor(self.pm.layer(l)(*args, **kwargs))
        except Exception as e:  # a block that cannot be re-run on its arguments proves nothing
            raise VerificationError(f"layer {l} could not be re-run with {zero} zeroed: {_line(e)}") from e
        finally:
            handle.remove()


class _Checks:
    """Compares tensors in float64; keeps each invariant's worst error / tolerance ratio."""

    def __init__(self):
        self.worst: dict[str, float] = {}

    def __call__(self, name: str, layer: int, got, want, *terms) -> None:
        got, want = got.double(), want.double()
        if got.shape != want.shape:
            raise VerificationError(
                f"invariant {name} fails at layer {layer}: shapes {tuple(got.shape)} and {tuple(want.shape)}"
            )
        eps = torch.finfo(terms[0].dtype).eps
        tol = _FACTOR * eps * max(float(t.double().abs().max()) for t in terms) + 1e-30
        err = float((got - want).abs().max())
        if err > tol:
            raise VerificationError(
                f"invariant {name} fails at layer {layer} by {err:.3g} (tolerance {tol:.3g})"
            )
        self.worst[name] = max(self.worst.get(name, 0.0), err / tol)


def _sequential(rec: _Record, check: _Checks, l: int) -> None:
    t = rec.taps[l]
    mid = rec.rerun(l, split_tap(rec.pm.taps()["mlp_out"])[0])
    check("resid_mid = block output with mlp_out zeroed", l, t["resid_mid"], mid, mid)
    check("mlp_out = resid_post - resid_mid", l, t["mlp_out"], t["resid_post"] - mid, mid, t["resid_post"])
    check("attn_out = resid_mid - resid_pre", l, t["attn_out"], mid - t["resid_pre"], mid, t["resid_pre"])


def _parallel(rec: _Record, check: _Checks, l: int) -> None:
    t, taps = rec.taps[l], rec.pm.taps()
    no_mlp = rec.rerun(l, split_tap(taps["mlp_out"])[0])
    no_attn = rec.rerun(l, split_tap(taps["attn_out"])[0])
    pre = t["resid_pre"]
    check(
        "attn_out = block output with mlp_out zeroed - resid_pre", l, t["attn_out"], no_mlp - pre, no_mlp, pre
    )
    check(
        "mlp_out = block output with attn_out zeroed - resid_pre",
        l,
        t["mlp_out"],
        no_attn - pre,
        no_attn,
        pre,
    )


BY_KIND = {SEQUENTIAL: _sequential, PARALLEL: _parallel}


def _stream_and_down(rec: _Record, check: _Checks) -> None:
    pm, hidden = rec.pm, getattr(rec.out, "hidden_states", None)
    for l in range(pm.n_layers):
        t = rec.taps[l]
        if hidden is not None and len(hidden) == pm.n_layers + 1:  # else the model reports other states
            check("resid_pre = output_hidden_states[l]", l, t["resid_pre"], hidden[l], hidden[l])
            if l < pm.n_layers - 1:  # the last entry is often after the final norm
                check(
                    "resid_post = output_hidden_states[l + 1]",
                    l,
                    t["resid_post"],
                    hidden[l + 1],
                    hidden[l + 1],
                )
        with torch.no_grad():
            again = pm.mlp_down(l)(t["mlp_post"])
        check("MLP output = down_proj(mlp_post)", l, again, rec.mlp[l], rec.mlp[l])


def _head_problem(rec: _Record) -> str | None:
    """Why final norm + head of the last block's output is not the model's readout, None if it is."""
    pm = rec.pm
    head, logits = pm.lm_head(), getattr(rec.out, "logits", None)
    if head is None or logits is None:
        return "the discovered row has no head (get_output_embeddings) to read layers out with"
    final = pm.final_norm() or torch.nn.Identity()
    with torch.no_grad():
        again = head(final(rec.taps[pm.n_layers - 1]["resid_post"]))
    try:
        _Checks()("logits = head(final_norm(resid_post[L-1]))", pm.n_layers - 1, again, logits, logits)
    except VerificationError as e:
        return f"the model does more than final norm + head to its last block's output ({e})"
    return None


def verify(pm, ids: torch.Tensor) -> tuple[dict[str, float], str | None]:
    """Raise VerificationError if the row contradicts the model; else (invariant -> worst error/tolerance,
    why the logit lens is not the model's readout or None)."""
    kind = pm.block_kind
    rec = _Record(pm, ids)
    missing = [(l, p) for l in range(pm.n_layers) for p in pm.taps() if p not in rec.taps.get(l, {})]
    if missing:
        raise VerificationError(
            f"tap {pm.taps()[missing[0][1]]!r} ({missing[0][1]}) never fired at layer {missing[0][0]}"
        )
    check = _Checks()
    for l in range(pm.n_layers):
        BY_KIND[kind](rec, check, l)
    _stream_and_down(rec, check)
    return check.worst, _head_problem(rec)
