"""THE non-finite-activation guard: every command that computes from a model (probe, trust through the
probe, diff, ...) refuses inf/NaN activations in one line naming the model, the first layer and the piece at
fault, instead of writing NaN numbers (issue 49: `tlm diff` once wrote them, then crashed in its summary)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from tlm_probe.errors import UserError


class NonFiniteError(UserError):
    """The model produced inf/NaN activations; the message names the first layer and piece."""


def non_finite(layer: int | None, piece: str, model: str = "") -> NonFiniteError:
    """The one message: `non-finite activations (inf/NaN) [in MODEL] at layer L in PIECE`."""
    who = f" in {model}" if model else ""
    where = f" at layer {layer} in {piece}" if layer is not None else f" in {piece}"
    return NonFiniteError(f"non-finite activations (inf/NaN){who}{where}: the model's weights or its dtype "
                          "overflow; nothing was written")


def refuse_non_finite(pieces: Iterable[tuple[int | None, str, torch.Tensor | None]], model: str = "") -> None:
    """Raise for the first (layer, piece, tensor) holding inf/NaN (None tensors are skipped)."""
    for layer, piece, x in pieces:
        if x is not None and not bool(torch.isfinite(x).all()):
            raise non_finite(layer, piece, model)
