"""THE non-finite guard: every command that computes from a model (probe, trust through the probe, diff,
eval, generate, the validation of train/compare) refuses inf/NaN activations in one line naming the model,
the first layer and the piece at fault, instead of writing NaN numbers (issue 49: `tlm diff` once wrote
them, then crashed in its summary); and a loaded model or resumed checkpoint whose weights hold inf/NaN,
naming the first such parameter."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from tlm_probe.errors import UserError


class NonFiniteError(UserError):
    """The model produced inf/NaN activations; the message names the first layer and piece."""


NOTHING_WRITTEN = "nothing was written"


def non_finite(layer: int | None, piece: str, model: str = "", then: str = NOTHING_WRITTEN) -> NonFiniteError:
    """The one message: `non-finite activations (inf/NaN) [in MODEL] at layer L in PIECE`; `then` says
    what became of the command's files."""
    who = f" in {model}" if model else ""
    where = f" at layer {layer} in {piece}" if layer is not None else f" in {piece}"
    return NonFiniteError(f"non-finite activations (inf/NaN){who}{where}: the model's weights or its dtype "
                          f"overflow; {then}")


def refuse_non_finite(pieces: Iterable[tuple[int | None, str, torch.Tensor | None]], model: str = "",
                      then: str = NOTHING_WRITTEN) -> None:
    """Raise for the first (layer, piece, tensor) holding inf/NaN (None tensors are skipped)."""
    for layer, piece, x in pieces:
        if x is not None and not bool(torch.isfinite(x).all()):
            raise non_finite(layer, piece, model, then)


def refuse_non_finite_weights(named: Iterable[tuple[str, torch.Tensor]], model: str = "",
                              then: str = NOTHING_WRITTEN) -> None:
    """Raise for the first named parameter holding inf/NaN (weights offloaded to the meta device are not
    here to read: their block is checked through its activations)."""
    for name, p in named:
        x = p.full_tensor() if hasattr(p, "full_tensor") else p  # FSDP's shards: every rank sees the whole
        if x.device.type != "meta" and not bool(torch.isfinite(x).all()):
            who = f" of {model}" if model else ""
            raise NonFiniteError(f"non-finite weights (inf/NaN) in {name}{who}: the checkpoint is damaged or "
                                 f"its training diverged; {then}")
